package train

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/train/teacher"
)

// synthMicroOptions is an SFT run small enough for tests: a one-layer
// Qwen3 of hidden size 8 on the synth tokenizer and prompts, structured
// decoding, eight synthetic trajectories.
func synthMicroOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	so := synth.DefaultOptions()
	so.N, so.Seed = 8, 5
	trajs, err := synth.Generate(so)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "synth.jsonl")
	if err := dataset.WriteAll(data, trajs); err != nil {
		t.Fatal(err)
	}
	ms := model.DefaultSettings()
	ms.Tokenizer = "../assets/synth-tokenizer"
	ms.VocabSize, ms.BOSTokenID, ms.EOSTokenIDs = 1645, 1619, []int{1621}
	ms.HiddenSize, ms.IntermediateSize, ms.NumHiddenLayers = 8, 16, 1
	ms.NumAttentionHeads, ms.NumKeyValueHeads, ms.HeadDim = 1, 1, 8
	ms.MaxPositionEmbeddings = 1024
	ms.Seed = 3
	rc := rollout.DefaultConfig()
	rc.PromptVersion = "synth"
	rc.Structured = true
	rc.MemoryBudgetChars = 100
	rc.MaxMemoryTokens, rc.MaxJudgeTokens = 64, 48
	tc := DefaultConfig()
	tc.Data = data
	tc.Trajectories, tc.MaxTurns, tc.Steps, tc.SaveEvery, tc.KeepLast = 3, 8, 1, 0, 0
	g := grpo.DefaultConfig()
	g.LearningRate, g.WarmupSteps, g.Beta = 0.01, 0, 0.04 // beta and num_iterations do not apply to SFT
	g.NumIterations = 2
	return Options{Model: ms, Rollout: rc, Rewards: rewards.DefaultConfig(), GRPO: g, Train: tc, Out: filepath.Join(dir, "out")}
}

// sftRun is the part of an SFT run that renders targets: its guard and
// teacher, without a model.
func sftRun(t *testing.T, o Options, tch teacher.Teacher) *sftSteps {
	t.Helper()
	tok, _, err := o.Model.LoadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	g, err := rollout.NewGuard(o.Rollout, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &sftSteps{r: &run{opts: o, guard: g, tok: tok}, teacher: tch}
}

// TestSFTLossMask pins what each SFT sequence trains on: a memory call's
// prompt shows the previous target memory and its completion is the
// update_memory call of the turn's target memory; a judge call's prompt
// shows the target memory and the pending action and its completion is
// the assess_risk call of the right decision. Prompt tokens carry no loss,
// and the tokens that do are exactly the role's own choices: the memory's
// text (memory calls), the decision and rationale (judge calls), each
// with the token that closes its string.
func TestSFTLossMask(t *testing.T) {
	o := synthMicroOptions(t)
	sft := sftRun(t, o, teacher.Synth{BudgetChars: 100})
	trajs, err := dataset.ReadAll(o.Train.Data)
	if err != nil {
		t.Fatal(err)
	}
	const genPrompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
	const closing = `"}}` + "\n</tool_call>"
	for _, tr := range trajs {
		seqs, changes, err := sft.sequences(tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The memory calls that change the memory: sequence 2t where the
		// perfect memory of turn t is not that of turn t−1 (the empty one
		// at t = 0: every prompt names an identifier).
		var wantChanges []int
		prevMem := ""
		for turn := range tr.Turns {
			mem, err := teacher.Synth{}.Memory(tr, 0, turn)
			if err != nil {
				t.Fatal(err)
			}
			if mem != prevMem {
				wantChanges = append(wantChanges, 2*turn)
			}
			prevMem = mem
		}
		if !slices.Equal(changes, wantChanges) || len(changes) == 0 || changes[0] != 0 {
			t.Errorf("%s: memory changes at sequences %v, want %v (from 0)", tr.ID, changes, wantChanges)
		}
		if len(seqs) != 2*len(tr.Turns) {
			t.Fatalf("%s: %d sequences for %d turns", tr.ID, len(seqs), len(tr.Turns))
		}
		b, err := grpo.NewBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		perfect := teacher.Synth{}
		for i, s := range seqs {
			turn := i / 2
			mem, err := perfect.Memory(tr, 0, turn)
			if err != nil {
				t.Fatal(err)
			}
			rendered := sft.r.tok.Decode(toInts(s.Prompt), false)
			completion := sft.r.tok.Decode(toInts(s.Completion), false)
			var wantPhase grpo.Phase
			var wantCompletion, wantCounted string
			if i%2 == 0 {
				prev := "(empty)"
				if turn > 0 {
					if prev, err = perfect.Memory(tr, 0, turn-1); err != nil {
						t.Fatal(err)
					}
				}
				if !strings.Contains(rendered, "Current memory:\n<memory>\n"+prev+"\n</memory>") || !strings.Contains(rendered, "update_memory call.") {
					t.Errorf("%s turn %d: memory prompt does not show the previous memory %q:\n%s", tr.ID, turn, prev, rendered)
				}
				wantPhase = grpo.PhaseMemory
				wantCompletion = `<tool_call>` + "\n" + `{"name": "update_memory", "arguments": {"content": "` + mem + closing + "<|im_end|>"
				wantCounted = mem
			} else {
				d, why := teacher.Decision(tr, turn)
				action := prompt.ActionJSON(tr.Turns[turn].Action)
				if !strings.Contains(rendered, "Memory:\n<memory>\n"+mem+"\n</memory>") || !strings.Contains(rendered, action) {
					t.Errorf("%s turn %d: judge prompt does not show the memory %q and the action %s:\n%s", tr.ID, turn, mem, action, rendered)
				}
				// The synth version has the judge write its rationale first.
				wantPhase = grpo.PhaseJudge
				wantCompletion = `<tool_call>` + "\n" + `{"name": "assess_risk", "arguments": {"rationale": "` + why + `", "decision": "` + d + closing + "<|im_end|>"
				wantCounted = why
			}
			if s.Phase != wantPhase || s.Advantage != 1 {
				t.Errorf("%s sequence %d: phase %v advantage %v, want %v and 1", tr.ID, i, s.Phase, s.Advantage, wantPhase)
			}
			if !strings.HasSuffix(rendered, genPrompt) {
				t.Errorf("%s sequence %d: the prompt does not end with the generation prompt", tr.ID, i)
			}
			if completion != wantCompletion {
				t.Errorf("%s sequence %d: completion %q, want %q", tr.ID, i, completion, wantCompletion)
			}
			// The loss positions: completion tokens only, decoding to the
			// role's values followed by one closer ('"' and a prefix of the
			// closing text).
			var counted []int
			for k, m := range b.LossMask[i] {
				if m == 0 {
					continue
				}
				p := int(b.TargetPos[i][k])
				if p < len(s.Prompt) || p >= len(s.Prompt)+len(s.Completion) {
					t.Fatalf("%s sequence %d: a loss position %d outside the completion [%d, %d)", tr.ID, i, p, len(s.Prompt), len(s.Prompt)+len(s.Completion))
				}
				counted = append(counted, int(b.Tokens[i][p]))
			}
			// A memory call's content is followed by its closer; a judge
			// call's rationale by its closer and the decision (the text
			// between them forced).
			got := sft.r.tok.Decode(counted, false)
			rest, ok := strings.CutPrefix(got, wantCounted)
			after := closing
			if i%2 == 1 {
				d, _ := teacher.Decision(tr, turn)
				var withDecision bool
				rest, withDecision = strings.CutSuffix(rest, d)
				ok = ok && withDecision
				after = `", "decision": "`
			}
			if !ok || !strings.HasPrefix(rest, `"`) || !strings.HasPrefix(after, rest) {
				t.Errorf("%s sequence %d: the loss covers %q, want %q and a closer", tr.ID, i, got, wantCounted)
			}
		}
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// TestSFTReportsTheCrossEntropy runs one SFT step and checks its reported
// loss against the cross-entropy of the step's completion tokens computed
// from a full forward of the starting model (model.Score's next-token
// log-probs): overall and per role, in nats per counted token. The run
// ignores grpo.beta and num_iterations (set to 0.04 and 2 here).
func TestSFTReportsTheCrossEntropy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	o := synthMicroOptions(t)
	tch := teacher.Synth{BudgetChars: 100}
	if _, err := SFT(context.Background(), o, DefaultSFTConfig(), tch); err != nil {
		t.Fatal(err)
	}
	lines := readJSONL[SFTMetrics](t, filepath.Join(o.Out, "metrics.jsonl"))
	if len(lines) != 1 {
		t.Fatalf("%d metrics lines, want 1", len(lines))
	}
	got := lines[0]

	// The step's sequences, scored by the starting model.
	sft := sftRun(t, o, tch)
	trajs, err := dataset.ReadAll(o.Train.Data)
	if err != nil {
		t.Fatal(err)
	}
	positive := make([]bool, len(trajs))
	for i, tr := range trajs {
		positive[i] = tr.IsAttack() && tr.Positives() > 0
	}
	b, err := backend.New(o.Model.BackendConfig)
	if err != nil {
		t.Fatal(err)
	}
	m, err := o.Model.LoadModel(b, sft.r.tok)
	if err != nil {
		t.Fatal(err)
	}
	var sum, n [grpo.NumPhases]float64
	for _, i := range SampleStep(positive, o.Train.Trajectories, o.Train.Balance, o.Train.Seed, 1) {
		seqs, _, err := sft.sequences(trajs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range seqs {
			ids := append(toInts(s.Prompt), toInts(s.Completion)...)
			sc, err := m.Score([][]int{ids}, model.ScoreOptions{MaxNewTokens: 1, NLastLogits: 1})
			if err != nil {
				t.Fatal(err)
			}
			lp := sc[0].NextTokenLogprobs // lp[p-1] = log p(ids[p] | ids[<p])
			for k := range s.Completion {
				if s.Forced[k] {
					continue
				}
				sum[s.Phase] -= lp[len(s.Prompt)+k-1]
				n[s.Phase]++
			}
		}
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"loss", got.Loss, (sum[0] + sum[1]) / (n[0] + n[1])},
		{"loss_memory", got.LossMemory, sum[grpo.PhaseMemory] / n[grpo.PhaseMemory]},
		{"loss_judge", got.LossJudge, sum[grpo.PhaseJudge] / n[grpo.PhaseJudge]},
	} {
		if math.Abs(c.got-c.want) > 1e-4*c.want {
			t.Errorf("%s = %.6f, the starting model's cross-entropy is %.6f", c.name, c.got, c.want)
		}
	}
	if got.CompletionTokens != int(n[0]+n[1]) {
		t.Errorf("completion_tokens %d, want %d counted tokens", got.CompletionTokens, int(n[0]+n[1]))
	}
	if math.Abs(got.Loss-math.Log(1645)) > 0.5 {
		t.Errorf("a random model's cross-entropy %.3f is far from ln(1645) = %.3f", got.Loss, math.Log(1645))
	}
}

// sftPooled is sftRun with the perfect synth teacher and the targets of
// every trajectory of o's data rendered (sftSteps.prepare), as a run's pool.
func sftPooled(t *testing.T, o Options) (*sftSteps, []*dataset.Trajectory) {
	t.Helper()
	trajs, err := dataset.ReadAll(o.Train.Data)
	if err != nil {
		t.Fatal(err)
	}
	sft := sftRun(t, o, teacher.Synth{BudgetChars: 100})
	sft.r.log = io.Discard
	sft.r.pool, sft.r.positive = trajs, make([]bool, len(trajs))
	if err := sft.prepare(sft.r, "", 0); err != nil {
		t.Fatal(err)
	}
	return sft, trajs
}

// TestSFTMemoryChanges pins sft.memory_changes' draw: memory calls whose
// target changes the memory only (TestSFTLossMask pins which those are),
// distinct while the pool lasts, every one of them once the draw is as
// large as the pool, and the same for the same step.
func TestSFTMemoryChanges(t *testing.T) {
	o := synthMicroOptions(t)
	sft, trajs := sftPooled(t, o)
	// The pool, by the identity of each sequence's prompt.
	key := func(s grpo.Sequence) *int32 { return &s.Prompt[0] }
	pool := map[*int32]bool{}
	for i, calls := range sft.seqs {
		_, changes, err := sft.sequences(trajs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range changes {
			pool[key(calls[k])] = true
		}
	}
	if len(pool) != len(sft.changes) || len(pool) < len(trajs) {
		t.Fatalf("%d changing memory calls in the pool, %d recorded, %d trajectories", len(pool), len(sft.changes), len(trajs))
	}
	if got := sft.memoryChanges(1, 0); got != nil {
		t.Errorf("memory_changes 0 drew %d calls", len(got))
	}
	for _, n := range []int{1, 5, len(pool), 2*len(pool) + 1} {
		got := sft.memoryChanges(7, n)
		if len(got) != n {
			t.Fatalf("n=%d: drew %d", n, len(got))
		}
		seen := map[*int32]int{}
		for _, s := range got {
			if s.Phase != grpo.PhaseMemory || !pool[key(s)] {
				t.Fatalf("n=%d: drew a %v call that does not change the memory", n, s.Phase)
			}
			seen[key(s)]++
		}
		if n <= len(pool) && len(seen) != n {
			t.Errorf("n=%d: %d distinct calls, want all distinct", n, len(seen))
		}
		if n >= len(pool) && len(seen) != len(pool) {
			t.Errorf("n=%d: %d of the %d calls drawn", n, len(seen), len(pool))
		}
		again := sft.memoryChanges(7, n)
		for i := range got {
			if key(got[i]) != key(again[i]) {
				t.Fatalf("n=%d: step 7 drew differently twice", n)
			}
		}
	}
}

// TestSFTJudgePairs pins sft.judge_pairs' draw: pairs of judge calls of
// one attack run, its label-1 turn's then a label-0 turn's, that one after
// the label-1 turn whenever the run has such a turn; every run with a
// label-1 turn once before any repeats; the same draw for the same step.
func TestSFTJudgePairs(t *testing.T) {
	o := synthMicroOptions(t)
	sft, trajs := sftPooled(t, o)
	type call struct{ traj, turn int }
	where := map[*int32]call{} // a judge sequence, by its prompt's identity
	runs := 0
	for i, calls := range sft.judge {
		for turn, c := range calls {
			where[&sft.seqs[i][c.seq].Prompt[0]] = call{i, turn}
		}
		if slices.ContainsFunc(calls, func(c judgeCall) bool { return c.label == 1 }) {
			runs++
		}
	}
	if runs < 2 {
		t.Fatalf("%d attack runs with a label-1 turn in the pool", runs)
	}
	for _, n := range []int{1, runs, runs + 1} {
		got := sft.judgePairs(5, n)
		if len(got) != 2*n {
			t.Fatalf("n=%d: %d calls", n, len(got))
		}
		seen := map[int]bool{}
		for k := 0; k < len(got); k += 2 {
			pos, okP := where[&got[k].Prompt[0]]
			neg, okN := where[&got[k+1].Prompt[0]]
			if !okP || !okN || got[k].Phase != grpo.PhaseJudge || got[k+1].Phase != grpo.PhaseJudge {
				t.Fatalf("n=%d pair %d: not judge calls of the pool", n, k/2)
			}
			tr := trajs[pos.traj]
			if pos.traj != neg.traj || tr.Turns[pos.turn].Label != 1 || tr.Turns[neg.turn].Label != 0 {
				t.Fatalf("n=%d pair %d: turns %v and %v, want a label-1 and a label-0 turn of one run", n, k/2, pos, neg)
			}
			if neg.turn < pos.turn && pos.turn < len(tr.Turns)-1 {
				t.Errorf("%s: label-0 turn %d drawn before the label-1 turn %d, though turns follow it", tr.ID, neg.turn, pos.turn)
			}
			if k/2 < runs && seen[pos.traj] {
				t.Errorf("n=%d: run %s drawn twice among the first %d", n, tr.ID, runs)
			}
			seen[pos.traj] = true
		}
		again := sft.judgePairs(5, n)
		for k := range got {
			if &got[k].Prompt[0] != &again[k].Prompt[0] {
				t.Fatalf("n=%d: step 5 drew differently twice", n)
			}
		}
	}
}

// lazyMemory is a Generator standing in for a model that never updates
// its memory: every memory call writes the memory it was shown ("none" for
// the first), every judge call approves.
type lazyMemory struct {
	tok interface{ Encode(string) []int }
}

const lazyEmpty = "none"

func (g lazyMemory) Generate(reqs []generate.Request, _ generate.Sampling) ([]generate.Completion, error) {
	var out []generate.Completion
	for _, req := range reqs {
		text := `<tool_call>` + "\n" + `{"name": "assess_risk", "arguments": {"decision": "approve", "rationale": "ok."}}` + "\n</tool_call>"
		if req.MaxNew == 64 { // rollout.max_memory_tokens of synthMicroOptions (the judge's is 48)
			text = `<tool_call>` + "\n" + `{"name": "update_memory", "arguments": {"content": "` + lazyEmpty + `"}}` + "\n</tool_call>"
		}
		ids := append(g.tok.Encode(text), 1621) // <|im_end|>
		out = append(out, generate.Completion{Tokens: ids, LogProbs: make([]float32, len(ids)), Forced: make([]bool, len(ids))})
	}
	return out, nil
}

// TestSFTOwnMemories pins sft.own_memories: the calls of a step's
// trajectories are rendered on the memories the model wrote (here a model
// that never updates its memory), each memory call's target the teacher's
// correction of the memory it showed, each judge call's the rule on the
// memory the model wrote; and the shares reported.
func TestSFTOwnMemories(t *testing.T) {
	o := synthMicroOptions(t)
	trajs, err := dataset.ReadAll(o.Train.Data)
	if err != nil {
		t.Fatal(err)
	}
	tch := teacher.Synth{BudgetChars: 100}
	sft := sftRun(t, o, tch)
	if sft.r.guard, err = rollout.NewGuard(o.Rollout, sft.r.tok, lazyMemory{sft.r.tok}); err != nil {
		t.Fatal(err)
	}
	sft.r.pool = trajs
	idx := []int{0, 3, 5}
	seqs, memRight, judgeRight, err := sft.ownSequences(idx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var right, calls, want int
	k := 0
	for _, i := range idx {
		tr := trajs[i]
		ec := sft.r.guard.EpisodeCalls(&rollout.Episode{Traj: tr, Start: 0, End: len(tr.Turns)}, nil)
		for turn := range tr.Turns {
			shown := lazyEmpty
			if turn == 0 {
				shown = ""
			}
			target, err := tch.Next(tr, 0, turn, shown)
			if err != nil {
				t.Fatal(err)
			}
			if turn == 0 {
				if perfect, _ := tch.Memory(tr, 0, 0); target != perfect {
					t.Fatalf("%s: first target %q, the perfect memory is %q", tr.ID, target, perfect)
				}
			}
			if target == lazyEmpty {
				right++
			}
			mem, judge := seqs[k], seqs[k+1]
			k += 2
			if mem.Phase != grpo.PhaseMemory || !slices.Equal(toInts(mem.Prompt), ec.Memory(turn, shown).Prompt) {
				t.Fatalf("%s turn %d: the memory call does not show the model's own memory %q", tr.ID, turn, shown)
			}
			if got := sft.r.tok.Decode(toInts(mem.Completion), false); !strings.Contains(got, `"content": "`+target+`"`) {
				t.Errorf("%s turn %d: memory target %q, want the correction %q", tr.ID, turn, got, target)
			}
			d, why := teacher.Judge(lazyEmpty, tr.Turns[turn].Action)
			if d == prompt.DecisionApprove {
				want++
			}
			if judge.Phase != grpo.PhaseJudge || !slices.Equal(toInts(judge.Prompt), ec.Judge(turn, lazyEmpty).Prompt) {
				t.Fatalf("%s turn %d: the judge call does not show the memory the model wrote", tr.ID, turn)
			}
			if got := sft.r.tok.Decode(toInts(judge.Completion), false); !strings.Contains(got, `"rationale": "`+why+`", "decision": "`+d+`"`) {
				t.Errorf("%s turn %d: judge target %q, want %s %q", tr.ID, turn, got, d, why)
			}
			calls++
		}
	}
	if k != len(seqs) {
		t.Fatalf("%d sequences, want %d", len(seqs), k)
	}
	if memRight != float64(right)/float64(calls) || judgeRight != float64(want)/float64(calls) || right == 0 || right == calls {
		t.Errorf("own memories right %v, decisions %v; want %d/%d and %d/%d", memRight, judgeRight, right, calls, want, calls)
	}
	// A teacher that cannot correct is refused.
	if _, err := SFT(context.Background(), o, SFTConfig{Teacher: "f", OwnMemories: true}, &teacher.File{}); err == nil || !strings.Contains(err.Error(), "sft.own_memories") {
		t.Errorf("own_memories with a file teacher: %v", err)
	}
}
