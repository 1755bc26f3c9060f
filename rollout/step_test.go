package rollout

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/model/tokenizer"
)

// hashed is a deterministic Generator: each reply is a function of the
// request's prompt tokens alone (a memory naming the prompt's hash, a judge
// that rejects send_money, and watched log-probs that depend on the prompt),
// so two runs that build the same prompts get the same completions. It
// records the size of every generation call.
type hashed struct {
	tok     *tokenizer.Tokenizer
	batches []int
}

func (h *hashed) Generate(reqs []Request, _ Sampling) ([]Completion, error) {
	h.batches = append(h.batches, len(reqs))
	end, _ := h.tok.TokenID("<|im_end|>")
	var out []Completion
	for _, r := range reqs {
		f := fnv.New64a()
		for _, id := range r.Prompt {
			f.Write([]byte(strconv.Itoa(id) + ","))
		}
		sum := f.Sum64()
		p := h.tok.Decode(r.Prompt, false)
		var text string
		switch {
		case strings.Contains(p, "Update the memory"):
			text = strings.ReplaceAll(memCall, "%s", "m"+strconv.FormatUint(sum%1000, 10))
		case strings.Contains(p, `"name": "send_money"`):
			text = strings.ReplaceAll(judgeCall, "%s", "reject")
		default:
			text = strings.ReplaceAll(judgeCall, "%s", "approve")
		}
		ids := append(h.tok.Encode(text), end)
		c := Completion{Tokens: ids, LogProbs: make([]float32, len(ids)), Forced: make([]bool, len(ids))}
		if len(r.Watch) > 0 {
			for range ids {
				w := make([]float32, len(r.Watch))
				for k := range w {
					w[k] = -float32((sum>>k)%7) - 0.5
				}
				c.Watch = append(c.Watch, w)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// sessionTrajectory: bankTrajectory with a user message before the last
// action and a long observation, so that Step has to elide it and show the
// message as Run does.
func sessionTrajectory() *dataset.Trajectory {
	tr := bankTrajectory()
	tr.Turns[0].Observation += strings.Repeat(" padding words", 80)
	tr.Turns[2].User = str("Also show me my balance.")
	return tr
}

// stepThrough drives one session per trajectory through Step, all sessions
// together, turn by turn, keeping the state a server keeps between steps.
func stepThrough(t *testing.T, g *Guard, trajs []*dataset.Trajectory) [][]Turn {
	t.Helper()
	out := make([][]Turn, len(trajs))
	for turn := 0; ; turn++ {
		var inputs []StepInput
		var who []int
		for i, tr := range trajs {
			if turn >= len(tr.Turns) {
				continue
			}
			in := StepInput{UserPrompt: tr.UserPrompt, First: turn == 0, Action: tr.Turns[turn].Action}
			if turn > 0 {
				in.Memory = out[i][turn-1].MemoryOut
				in.Previous = &tr.Turns[turn-1].Action
				in.Observation = tr.Turns[turn-1].Observation
			}
			if u := tr.Turns[turn].User; u != nil {
				in.UserMessages = []string{*u}
			}
			inputs = append(inputs, in)
			who = append(who, i)
		}
		if len(inputs) == 0 {
			return out
		}
		turns, _, err := g.Step(inputs, Sampling{Greedy: true, Temperature: 1, TopP: 1})
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range who {
			out[i] = append(out[i], turns[k])
		}
	}
}

func TestStepEqualsRun(t *testing.T) {
	tok := qwenTokenizer(t)
	cfg := DefaultConfig()
	cfg.MaxObservationTokens = 32
	trajs := []*dataset.Trajectory{sessionTrajectory(), bankTrajectory()}
	trajs[1].ID, trajs[1].Turns = "t2", trajs[1].Turns[:2]

	gen := &hashed{tok: tok}
	g, err := NewGuard(cfg, tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	var eps []*Episode
	for _, tr := range trajs {
		eps = append(eps, &Episode{Traj: tr, Start: 0, End: len(tr.Turns)})
	}
	chains, _, err := g.Run(eps, RunOptions{Chains: 1, Sampling: Sampling{Greedy: true, Temperature: 1, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	gen.batches = nil
	stepped := stepThrough(t, g, trajs)
	// Two sessions at turns 0 and 1, one at turn 2: a memory batch then a
	// judge batch per turn.
	if want := []int{2, 2, 2, 2, 1, 1}; !slices.Equal(gen.batches, want) {
		t.Errorf("generation batches %v, want %v", gen.batches, want)
	}
	scored := 0
	for i, ch := range chains {
		if len(stepped[i]) != len(ch.Turns) {
			t.Fatalf("trajectory %d: %d steps, %d turns", i, len(stepped[i]), len(ch.Turns))
		}
		for k, want := range ch.Turns {
			got := stepped[i][k]
			if !slices.Equal(got.Memory.Prompt, want.Memory.Prompt) {
				t.Errorf("trajectory %d turn %d: memory prompts differ:\nstep: %s\nrun:  %s", i, k, tok.Decode(got.Memory.Prompt, false), tok.Decode(want.Memory.Prompt, false))
			}
			if !slices.Equal(got.Judge.Prompt, want.Judge.Prompt) {
				t.Errorf("trajectory %d turn %d: judge prompts differ", i, k)
			}
			if got.MemoryOut != want.MemoryOut || got.Decision != want.Decision || got.Rationale != want.Rationale ||
				got.Score != want.Score || got.ScoreExact != want.ScoreExact || got.GuardTokens() != want.GuardTokens() {
				t.Errorf("trajectory %d turn %d: step %q %s %q %g, run %q %s %q %g", i, k,
					got.MemoryOut, got.Decision, got.Rationale, got.Score, want.MemoryOut, want.Decision, want.Rationale, want.Score)
			}
			if want.ScoreExact && want.Score > 0 && want.Score < 1 {
				scored++
			}
		}
	}
	if scored == 0 {
		t.Error("no turn had a score read from log-probs: the comparison of scores tests nothing")
	}
	// The elided observation and the user message reached the memory.
	p := tok.Decode(stepped[0][1].Memory.Prompt, false)
	if !strings.Contains(p, "tokens elided ...]") {
		t.Error("the long observation was not elided")
	}
	if p := tok.Decode(stepped[0][2].Memory.Prompt, false); !strings.Contains(p, "<user_request>\nAlso show me my balance.\n</user_request>") {
		t.Error("the user message is not in the memory prompt")
	}
}

func TestStepRefusesBadInput(t *testing.T) {
	tok := qwenTokenizer(t)
	g, err := NewGuard(DefaultConfig(), tok, &hashed{tok: tok})
	if err != nil {
		t.Fatal(err)
	}
	a := action("f", `{}`)
	for _, c := range []struct {
		in   StepInput
		want string
	}{
		{StepInput{First: true}, "no name"},
		{StepInput{First: true, Previous: &a, Action: a}, "previous action"},
		{StepInput{First: false, Action: a}, "previous action"},
	} {
		if _, _, err := g.Step([]StepInput{c.in}, Sampling{Greedy: true}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.in, err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Variant = "judge-only"
	jo, err := NewGuard(cfg, tok, &hashed{tok: tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := jo.Step([]StepInput{{First: true, Action: a}}, Sampling{Greedy: true}); err == nil || !strings.Contains(err.Error(), "mage variant") {
		t.Errorf("judge-only Step: error %v", err)
	}
}

// TestStepElidesActionsAndUserTexts: a huge argument, user request and
// user message reach Step's prompts elided exactly as Run's.
func TestStepElidesActionsAndUserTexts(t *testing.T) {
	tok := qwenTokenizer(t)
	cfg := DefaultConfig()
	cfg.MaxUserTokens, cfg.MaxArgumentTokens, cfg.MaxActionTokens = 16, 16, 64
	tr := bankTrajectory()
	tr.UserPrompt += strings.Repeat(" and more", 40)
	tr.Turns[1].Action = action("send_email", `{"to": "a@b.c", "body": "`+strings.Repeat("long body ", 60)+`"}`)
	tr.Turns[2].User = str("Also" + strings.Repeat(" this", 40))
	gen := &hashed{tok: tok}
	g, err := NewGuard(cfg, tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	chains, _, err := g.Run([]*Episode{{Traj: tr, Start: 0, End: len(tr.Turns)}}, RunOptions{Chains: 1, Sampling: Sampling{Greedy: true, Temperature: 1, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	stepped := stepThrough(t, g, []*dataset.Trajectory{tr})[0]
	for k, want := range chains[0].Turns {
		if !slices.Equal(stepped[k].Memory.Prompt, want.Memory.Prompt) || !slices.Equal(stepped[k].Judge.Prompt, want.Judge.Prompt) {
			t.Errorf("turn %d: prompts differ:\nstep: %s\nrun:  %s", k, tok.Decode(stepped[k].Judge.Prompt, false), tok.Decode(want.Judge.Prompt, false))
		}
	}
	if p := tok.Decode(stepped[1].Judge.Prompt, false); !strings.Contains(p, "tokens elided ...]") || !strings.Contains(p, `"to": "a@b.c"`) {
		t.Errorf("the long argument is not elided in place: %s", p)
	}
}
