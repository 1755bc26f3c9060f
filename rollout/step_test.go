package rollout

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout/generate"
)

// hashed returns a deterministic Generator: each reply is a function of
// the request's prompt tokens alone (a memory naming the prompt's hash, a
// judge that rejects send_money, and watched log-probs that depend on the
// prompt), so two runs that build the same prompts get the same
// completions. It records the size of every generation call.
func hashed(tok *tokenizer.Tokenizer) *guardtest.Scripted {
	return &guardtest.Scripted{
		Tok: tok,
		Reply: func(r generate.Request, p string) (string, error) {
			switch {
			case strings.Contains(p, "Update the memory"):
				return guardtest.MemoryCall("m" + strconv.FormatUint(promptHash(r)%1000, 10)), nil
			case strings.Contains(p, `"name": "send_money"`):
				return guardtest.JudgeCall("reject", "r"), nil
			default:
				return guardtest.JudgeCall("approve", "r"), nil
			}
		},
		Watch: func(r generate.Request, _ string) []float32 {
			sum := promptHash(r)
			w := make([]float32, len(r.Watch))
			for k := range w {
				w[k] = -float32((sum>>k)%7) - 0.5
			}
			return w
		},
	}
}

// promptHash is the FNV-1a hash of a request's prompt token ids.
func promptHash(r generate.Request) uint64 {
	f := fnv.New64a()
	for _, id := range r.Prompt {
		f.Write([]byte(strconv.Itoa(id) + ","))
	}
	return f.Sum64()
}

// sessionTrajectory: bankTrajectory with a user message before the last
// action and a long observation, so that Step has to elide it and show the
// message as Run does.
func sessionTrajectory() *dataset.Trajectory {
	tr := guardtest.BankTrajectory()
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
		turns, _, err := g.Step(inputs, generate.Sampling{Greedy: true, Temperature: 1, TopP: 1})
		if err != nil {
			t.Fatal(err)
		}
		for k, i := range who {
			out[i] = append(out[i], turns[k])
		}
	}
}

func TestStepEqualsRun(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	cfg := DefaultConfig()
	cfg.MaxObservationTokens = 32
	trajs := []*dataset.Trajectory{sessionTrajectory(), guardtest.BankTrajectory()}
	trajs[1].ID, trajs[1].Turns = "t2", trajs[1].Turns[:2]

	gen := hashed(tok)
	g, err := NewGuard(cfg, tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	var eps []*Episode
	for _, tr := range trajs {
		eps = append(eps, &Episode{Traj: tr, Start: 0, End: len(tr.Turns)})
	}
	chains, _, err := g.Run(eps, RunOptions{Chains: 1, Sampling: generate.Sampling{Greedy: true, Temperature: 1, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ran := len(gen.Batches())
	stepped := stepThrough(t, g, trajs)
	// Two sessions at turns 0 and 1, one at turn 2: a memory batch then a
	// judge batch per turn.
	if want := []int{2, 2, 2, 2, 1, 1}; !slices.Equal(gen.Batches()[ran:], want) {
		t.Errorf("generation batches %v, want %v", gen.Batches()[ran:], want)
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
	tok := guardtest.Tokenizer(t)
	g, err := NewGuard(DefaultConfig(), tok, hashed(tok))
	if err != nil {
		t.Fatal(err)
	}
	a := guardtest.Action("f", `{}`)
	for _, c := range []struct {
		in   StepInput
		want string
	}{
		{StepInput{First: true}, "no name"},
		{StepInput{First: true, Previous: &a, Action: a}, "previous action"},
		{StepInput{First: false, Action: a}, "previous action"},
	} {
		if _, _, err := g.Step([]StepInput{c.in}, generate.Sampling{Greedy: true}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.in, err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Variant = "judge-only"
	jo, err := NewGuard(cfg, tok, hashed(tok))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := jo.Step([]StepInput{{First: true, Action: a}}, generate.Sampling{Greedy: true}); err == nil || !strings.Contains(err.Error(), "mage variant") {
		t.Errorf("judge-only Step: error %v", err)
	}
}

// TestStepElidesAsRun: a session whose user request, user message, action
// arguments (a long string, and an array of 30,000 numbers) and
// observation are all long gets from Step exactly the prompts Run builds
// for the same trajectory (one elision for both), each bounded, with the
// same elisions counted; before, Step elided only the observation.
func TestStepElidesAsRun(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	numbers := make([]int, 30_000)
	for i := range numbers {
		numbers[i] = i * 7
	}
	many, _ := json.Marshal(map[string]any{"ids": numbers})
	long, _ := json.Marshal(map[string]string{"to": "mallory@evil.com", "body": guardtest.Words(60_000, 2)})
	tr := guardtest.BankTrajectory()
	tr.UserPrompt = guardtest.Words(60_000, 3)
	tr.Turns[0].Observation = guardtest.Words(60_000, 5)
	tr.Turns[1].Action = dataset.Action{Name: "send_email", Arguments: long}
	tr.Turns[1].User = str(guardtest.Words(60_000, 4))
	tr.Turns[2].Action = dataset.Action{Name: "delete", Arguments: many}

	gen := hashed(tok)
	g, err := NewGuard(DefaultConfig(), tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	chains, runStats, err := g.Run([]*Episode{{Traj: tr, Start: 0, End: 3}}, RunOptions{Chains: 1, Sampling: generate.Sampling{Greedy: true, Temperature: 1, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	stepped := stepThrough(t, g, []*dataset.Trajectory{tr})[0]
	for k, want := range chains[0].Turns {
		got := stepped[k]
		if !slices.Equal(got.Memory.Prompt, want.Memory.Prompt) || !slices.Equal(got.Judge.Prompt, want.Judge.Prompt) {
			t.Errorf("turn %d: the prompts of Step and Run differ", k)
		}
		if n := max(len(got.Memory.Prompt), len(got.Judge.Prompt)); n > 5000 {
			t.Errorf("turn %d: a prompt of %d tokens", k, n)
		}
	}
	// Run elides each text once per trajectory; Step elides a previous
	// action again with its observation, at the next step. Counted apart
	// from that, the same texts were elided.
	var stepStats Stats
	for k := range stepped {
		in := StepInput{UserPrompt: tr.UserPrompt, First: k == 0, Action: tr.Turns[k].Action}
		if k > 0 {
			in.Previous, in.Observation = &tr.Turns[k-1].Action, tr.Turns[k-1].Observation
		}
		if u := tr.Turns[k].User; u != nil {
			in.UserMessages = []string{*u}
		}
		p, err := g.PrepareStep(in)
		if err != nil {
			t.Fatal(err)
		}
		stepStats.Add(p.prepared.stats)
	}
	if runStats.ElidedUsers != 2 || stepStats.ElidedUsers != 2 || runStats.ElidedObs != 1 || stepStats.ElidedObs != 1 ||
		runStats.ElidedArguments != 1 || runStats.ElidedActions != 1 || stepStats.ElidedArguments != 2 || stepStats.ElidedActions != 1 {
		t.Errorf("elisions: run %+v, step %+v", runStats, stepStats)
	}
}

// TestAStepTooLongFailsAlone: with MaxPromptTokens, a step whose memory
// prompt is too long (many user messages) is refused by PrepareStep and,
// given to Step unprepared beside a normal step, fails alone: the normal
// step's turn is the one it gets alone.
func TestAStepTooLongFailsAlone(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	gen := hashed(tok)
	g, err := NewGuard(DefaultConfig(), tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	normal := StepInput{UserPrompt: "Pay the bill", First: true, Action: guardtest.Action("read_file", `{"file_path":"bill.txt"}`), MaxPromptTokens: 4000}
	long := normal
	for i := 0; i < 8; i++ {
		long.UserMessages = append(long.UserMessages, guardtest.Words(4000, uint64(i)))
	}
	_, err = g.PrepareStep(long)
	var tooLong *PromptTooLongError
	if !errors.As(err, &tooLong) || tooLong.Role != MemoryRole || tooLong.Max != 4000 || tooLong.Tokens <= 4000 {
		t.Fatalf("PrepareStep: %v", err)
	}
	if !strings.Contains(err.Error(), "the memory prompt has ") || !strings.Contains(err.Error(), "more than the 4000 allowed") {
		t.Errorf("error %q", err)
	}
	alone, _, err := g.Step([]StepInput{normal}, generate.Sampling{Greedy: true})
	if err != nil {
		t.Fatal(err)
	}
	turns, _, err := g.Step([]StepInput{long, normal}, generate.Sampling{Greedy: true})
	var rows *StepErrors
	if !errors.As(err, &rows) || !errors.As(rows.Errs[0], &tooLong) || rows.Errs[1] != nil {
		t.Fatalf("Step: %v", err)
	}
	if turns[1].Decision != alone[0].Decision || turns[1].MemoryOut != alone[0].MemoryOut || !slices.Equal(turns[1].Judge.Prompt, alone[0].Judge.Prompt) {
		t.Errorf("the normal step beside the long one: %+v, alone %+v", turns[1], alone[0])
	}
	// A prepared step runs as the unprepared one, and may run again.
	p, err := g.PrepareStep(normal)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		again, _, err := g.Step([]StepInput{p}, generate.Sampling{Greedy: true})
		if err != nil || again[0].MemoryOut != alone[0].MemoryOut || !slices.Equal(again[0].Memory.Prompt, alone[0].Memory.Prompt) ||
			again[0].Score != alone[0].Score {
			t.Fatalf("prepared: %+v %v", again, err)
		}
	}
}
