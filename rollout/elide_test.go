package rollout

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout/generate"
)

// TestAHugeTrajectoryRunsWithBoundedPrompts: a trajectory with a 533 KB
// user request, a 533 KB user message, a 533 KB argument and a 533 KB
// observation runs through the guard loop (both variants) with every
// prompt under 8,000 tokens, and the elisions are counted; before, its
// 266K-token prompts failed the whole batch, and with it the eval or the
// training run.
func TestAHugeTrajectoryRunsWithBoundedPrompts(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	huge := func(seed uint64) string { return guardtest.Words(533_000, seed) }
	args, _ := json.Marshal(map[string]string{"to": "mallory@evil.com", "body": huge(2)})
	tr := guardtest.BankTrajectory()
	tr.UserPrompt = huge(3)
	tr.Turns[1].Action = dataset.Action{Name: "send_email", Arguments: args}
	tr.Turns[1].User = str(huge(4))
	tr.Turns[0].Observation = huge(5)
	for _, variant := range []string{"mage", "judge-only"} {
		t.Run(variant, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Variant = variant
			gen := guardtest.Script(tok, func(p string) string {
				if strings.Contains(p, "update_memory call") {
					return guardtest.MemoryCall("m")
				}
				return guardtest.JudgeCall("approve", "r")
			})
			longest := 0
			g, err := NewGuard(cfg, tok, generatorFunc(func(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
				for _, r := range reqs {
					longest = max(longest, len(r.Prompt))
				}
				return gen.Generate(reqs, s)
			}))
			if err != nil {
				t.Fatal(err)
			}
			chains, stats, err := g.Run([]*Episode{{Traj: tr, Start: 0, End: 3}}, RunOptions{Chains: 1, Sampling: generate.Sampling{Greedy: true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(chains[0].Turns) != 3 || longest > 8000 {
				t.Fatalf("%d turns, longest prompt %d tokens", len(chains[0].Turns), longest)
			}
			if stats.ElidedUsers != 2 || stats.ElidedArguments != 1 || stats.ElidedObs != 1 || stats.ElidedUserTokens < 200_000 {
				t.Fatalf("stats %+v", stats)
			}
			if !strings.Contains(stats.String(), "1 argument values and 0 whole actions elided") || !strings.Contains(stats.String(), "2 user messages elided") {
				t.Fatalf("the log line does not say what was elided: %s", stats)
			}
		})
	}
}

// generatorFunc adapts a function to Generator.
type generatorFunc func([]generate.Request, generate.Sampling) ([]generate.Completion, error)

func (f generatorFunc) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	return f(reqs, s)
}

// TestElideActionIsWhatTheJudgeSees: Guard.ElideAction gives the pending
// action exactly as a step's judge prompt shows it — a huge argument
// elided in place, a short action unchanged.
func TestElideActionIsWhatTheJudgeSees(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	g, err := NewGuard(DefaultConfig(), tok, guardtest.Script(tok, func(string) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
	huge, _ := json.Marshal(map[string]string{"to": "mallory@evil.com", "body": guardtest.Words(20_000, 7)})
	for _, a := range []dataset.Action{
		{Name: "send_email", Arguments: huge},
		{Name: "read_file", Arguments: json.RawMessage(`{"path":"notes.txt"}`)},
	} {
		in, err := g.PrepareStep(StepInput{UserPrompt: "Pay the bill", First: true, Action: a})
		if err != nil {
			t.Fatal(err)
		}
		got := g.ElideAction(a)
		if want := in.prepared.action; got.Name != want.Name || string(got.Arguments) != string(want.Arguments) {
			t.Errorf("ElideAction %s %.200s, the judge sees %s %.200s", got.Name, got.Arguments, want.Name, want.Arguments)
		}
		if long := len(a.Arguments) > 1000; long != strings.Contains(string(got.Arguments), "tokens elided") || !long && string(got.Arguments) != string(a.Arguments) {
			t.Errorf("%s: %.200s", a.Name, got.Arguments)
		}
	}
}
