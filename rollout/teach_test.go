package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// recorder returns a Generator that answers every memory call with a
// memory naming its turn and every judge call with an approval, and
// records the prompts it was asked, in order, in *prompts.
func recorder(tok *tokenizer.Tokenizer, prompts *[][]int) *guardtest.Scripted {
	return &guardtest.Scripted{Tok: tok, Reply: func(r generate.Request, p string) (string, error) {
		*prompts = append(*prompts, r.Prompt)
		if strings.Contains(p, "Update the memory with one update_memory call.") {
			return guardtest.MemoryCall(fmt.Sprintf("memory after %d prompts", len(*prompts))), nil
		}
		return guardtest.JudgeCall("approve", "r"), nil
	}}
}

// TestEpisodeCallsAreTheGuardLoopsPrompts renders every call of an episode
// with EpisodeCalls, from the memories the loop produced, and finds exactly
// the prompts the loop sent to its generator, in order: for both variants
// and for a window that starts after the trajectory's first turn.
func TestEpisodeCallsAreTheGuardLoopsPrompts(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	for _, tc := range []struct {
		variant    string
		start, end int
	}{{"mage", 0, 3}, {"mage", 1, 3}, {"judge-only", 0, 3}, {"judge-only", 1, 3}} {
		t.Run(fmt.Sprintf("%s[%d,%d)", tc.variant, tc.start, tc.end), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Variant = tc.variant
			var prompts [][]int
			gen := recorder(tok, &prompts)
			g, err := NewGuard(cfg, tok, gen)
			if err != nil {
				t.Fatal(err)
			}
			ep := &Episode{Traj: guardtest.BankTrajectory(), Start: tc.start, End: tc.end}
			chains, _, err := g.Run([]*Episode{ep}, RunOptions{Chains: 1, Sampling: generate.Sampling{Temperature: 1}})
			if err != nil {
				t.Fatal(err)
			}
			calls := g.EpisodeCalls(ep, nil)
			var want [][]int
			prev := ""
			for i, tu := range chains[0].Turns {
				if c := calls.Memory(i, prev); c != nil {
					want = append(want, c.Prompt)
					if c.PrefixTokens != tu.Memory.PrefixTokens {
						t.Errorf("turn %d: memory prefix %d tokens, the loop's %d", i, c.PrefixTokens, tu.Memory.PrefixTokens)
					}
				} else if tc.variant == "mage" {
					t.Fatalf("turn %d: no memory call for variant mage", i)
				}
				want = append(want, calls.Judge(i, tu.MemoryOut).Prompt)
				prev = tu.MemoryOut
			}
			if len(want) != len(prompts) {
				t.Fatalf("rendered %d calls, the loop made %d", len(want), len(prompts))
			}
			for i := range want {
				if !slices.Equal(want[i], prompts[i]) {
					t.Errorf("call %d differs:\nrendered %q\nloop     %q", i, tok.Decode(want[i], false), tok.Decode(prompts[i], false))
				}
			}
		})
	}
}

// synthTokenizer loads the synth tokenizer (assets/synth-tokenizer).
func synthTokenizer(t *testing.T) *tokenizer.Tokenizer {
	tok, err := tokenizer.Load("../assets/synth-tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCompletionIsTheCallTheModelWrites pins the target tokens of a call:
// they decode to ToolCall.Text and <|im_end|>; the values are encoded as
// untrusted text on their own; with structured decoding the grammar
// accepts them, and exactly the values' tokens, the closing quote's token
// and the decision's token are left unforced (the model's choices).
func TestCompletionIsTheCallTheModelWrites(t *testing.T) {
	for _, tokName := range []string{"qwen3", "synth"} {
		var tok *tokenizer.Tokenizer
		cfg := DefaultConfig()
		if tokName == "qwen3" {
			tok = guardtest.Tokenizer(t)
		} else {
			tok = synthTokenizer(t)
			cfg.PromptVersion = "synth"
		}
		for _, structured := range []bool{false, true} {
			cfg.Structured = structured
			g, err := NewGuard(cfg, tok, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				role   Role
				call   prompt.ToolCall
				values []string // the free string values, in order
			}{
				{MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: "acct-bako allowed, acct-tesa injected"}, []string{"acct-bako allowed, acct-tesa injected"}},
				// A value that reads like the template's own keys.
				{MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: "name: content arguments"}, []string{"name: content arguments"}},
				{MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: ""}, []string{""}},
				{JudgeRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: "reject", Rationale: "acct-tesa injected"}, []string{"acct-tesa injected"}},
				{JudgeRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: "approve", Rationale: "rationale"}, []string{"rationale"}},
			} {
				name := fmt.Sprintf("%s/structured=%v/%s %q", tokName, structured, tc.role, tc.values[0])
				toks, forced, err := g.Completion(tc.role, tc.call)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got, want := tok.Decode(toks, false), tc.call.TextIn(g.Prompts().JudgeArgs)+"<|im_end|>"; got != want {
					t.Errorf("%s: decodes to %q, want %q", name, got, want)
				}
				if !structured {
					if forced != nil {
						t.Errorf("%s: forced flags without structured decoding", name)
					}
					continue
				}
				// Unforced: each value's untrusted tokens, then one closer
				// (a token starting with '"'); the judge's decision token,
				// before the rationale or after it as the version orders them.
				var free []int
				for k, f := range forced {
					if !f {
						free = append(free, toks[k])
					}
				}
				var want []int
				decisionFirst := tc.role == JudgeRole && g.Prompts().JudgeArgs[0] == "decision"
				if decisionFirst {
					want = append(want, tok.Encode(tc.call.Decision)[0])
				}
				for _, v := range tc.values {
					want = append(want, tok.EncodeUntrusted(v)...)
					want = append(want, -1) // the closer
				}
				if tc.role == JudgeRole && !decisionFirst {
					want = append(want, tok.Encode(tc.call.Decision)[0])
				}
				if len(free) != len(want) {
					t.Fatalf("%s: %d unforced tokens %q, want %d", name, len(free), tok.Decode(free, false), len(want))
				}
				for k := range want {
					if want[k] == -1 {
						if s := tok.Decode(free[k:k+1], false); !strings.HasPrefix(s, `"`) {
							t.Errorf("%s: unforced token %d is %q, want a closer", name, k, s)
						}
					} else if free[k] != want[k] {
						t.Errorf("%s: unforced token %d is %q, want %q", name, k, tok.Decode(free[k:k+1], false), tok.Decode(want[k:k+1], false))
					}
				}
				if !forced[0] || !forced[len(forced)-1] {
					t.Errorf("%s: <tool_call> or the stop token is not forced", name)
				}
			}
		}
	}
}

// TestCompletionRefusesWhatTheGuardCannotWrite: a value that needs a JSON
// escape (structured decoding cannot emit '\'), a call over the role's
// token budget, the wrong tool, a decision outside the enum.
func TestCompletionRefusesWhatTheGuardCannotWrite(t *testing.T) {
	tok := synthTokenizer(t)
	cfg := DefaultConfig()
	cfg.PromptVersion = "synth"
	cfg.MaxMemoryTokens = 40
	for _, structured := range []bool{false, true} {
		cfg.Structured = structured
		g, err := NewGuard(cfg, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		quoted := prompt.ToolCall{Name: prompt.MemoryToolName, Content: `the "quoted" id`}
		toks, _, err := g.Completion(MemoryRole, quoted)
		if structured {
			if err == nil || !strings.Contains(err.Error(), "structured decoding cannot write") {
				t.Errorf("structured: a quote in a value: err %v", err)
			}
		} else if err != nil {
			t.Errorf("free decoding: a quote in a value: %v", err)
		} else if c, err := prompt.ParseMemory(tok.Decode(toks, false)); err != nil || c.Content != quoted.Content {
			t.Errorf("free decoding: the quoted value parses as %q, %v", c.Content, err)
		}
		for _, tc := range []struct {
			role Role
			call prompt.ToolCall
			want string
		}{
			{MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: strings.Repeat("acct-kolo ", 20)}, "over the budget of 40"},
			{MemoryRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: "approve"}, "want update_memory"},
			{JudgeRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: "allow"}, "neither"},
		} {
			if _, _, err := g.Completion(tc.role, tc.call); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("structured %v: %+v: err %v, want %q", structured, tc.call, err, tc.want)
			}
		}
	}
}
