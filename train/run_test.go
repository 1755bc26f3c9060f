package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/safetensors"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
)

// microOptions is a training run small enough for tests: a one-layer
// Qwen3 of hidden size 8 with the real tokenizer, one-turn windows, two
// chains, structured decoding with short budgets.
func microOptions(t *testing.T, out string) Options {
	t.Helper()
	ms := model.DefaultSettings()
	ms.Tokenizer = "../assets/qwen3"
	ms.HiddenSize, ms.IntermediateSize, ms.NumHiddenLayers = 8, 16, 1
	ms.NumAttentionHeads, ms.NumKeyValueHeads, ms.HeadDim = 1, 1, 8
	ms.Seed = 3
	rc := rollout.DefaultConfig()
	rc.GroupSize = 2
	rc.Structured = true
	rc.MaxMemoryTokens, rc.MaxJudgeTokens = 26, 32
	rc.MaxObservationTokens = 64
	tc := DefaultConfig()
	tc.Data = "testdata/micro.jsonl"
	tc.Trajectories, tc.MaxTurns, tc.Steps, tc.SaveEvery, tc.KeepLast = 2, 1, 2, 0, 0
	tc.LogRollouts = true
	g := grpo.DefaultConfig()
	g.LearningRate, g.WarmupSteps, g.Beta = 0.05, 0, 0
	return Options{Model: ms, Rollout: rc, Rewards: rewards.DefaultConfig(), GRPO: g, Train: tc, Out: out}
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	return out
}

// TestRolloutsFollowTheFormulas recomputes every reward and advantage of
// rollouts.jsonl from that file's own labels, decisions, parse flags and
// memory lengths, with the formulas of docs/design.md#rewards written out here independently.
func TestRolloutsFollowTheFormulas(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	o := microOptions(t, t.TempDir())
	o.Train.MaxTurns = 2
	o.Rewards.Gamma, o.Rewards.Lambda, o.Rewards.LengthThreshold = 0.5, 1, 40 // memories of ~40–90 chars pay a length penalty
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	rows := readJSONL[rolloutRow](t, filepath.Join(o.Out, "rollouts.jsonl"))
	type key struct {
		step int
		id   string
	}
	groups := map[key][]rolloutRow{}
	for _, r := range rows {
		k := key{r.Step, r.TrajectoryID}
		groups[k] = append(groups[k], r)
	}
	if len(groups) != o.Train.Steps*o.Train.Trajectories {
		t.Fatalf("%d (step, trajectory) groups, want %d", len(groups), o.Train.Steps*o.Train.Trajectories)
	}
	f, L, lambda, gamma := o.Rewards.FormatPenalty, float64(o.Rewards.LengthThreshold), o.Rewards.Lambda, o.Rewards.Gamma
	nonzero, penalized := 0, 0
	for _, g := range groups {
		// Index the group's rows by (turn, chain); turns are the window's.
		G := o.Rollout.GroupSize
		minTurn, maxTurn := math.MaxInt, -1
		for _, r := range g {
			minTurn, maxTurn = min(minTurn, r.Turn), max(maxTurn, r.Turn)
		}
		T := maxTurn - minTurn + 1
		if len(g) != T*G {
			t.Fatalf("group has %d rows, want %d turns × %d chains", len(g), T, G)
		}
		at := func(tt, c int) rolloutRow {
			for _, r := range g {
				if r.Turn-minTurn == tt && r.Chain == c {
					return r
				}
			}
			t.Fatalf("no row for turn %d chain %d", tt, c)
			return rolloutRow{}
		}
		correct := func(r rolloutRow) float64 {
			want := "approve"
			if r.Label == 1 {
				want = "reject"
			}
			if r.JudgeParsed && r.Decision == want {
				return 1
			}
			return 0
		}
		rJ := make([][]float64, T)
		rM := make([][]float64, T)
		for tt := 0; tt < T; tt++ {
			rJ[tt], rM[tt] = make([]float64, G), make([]float64, G)
			for c := 0; c < G; c++ {
				r := at(tt, c)
				// r^J = c − f·[judge unparsed]
				rJ[tt][c] = correct(r)
				if !r.JudgeParsed {
					rJ[tt][c] -= f
				}
				// r^M = Σ_k γ^{k−t} c_k / Σ_k γ^{k−t} − f·[memory unparsed] − λ·min(1, max(0, |m|−L)/L)
				num, den := 0.0, 0.0
				for k := tt; k < T; k++ {
					w := math.Pow(gamma, float64(k-tt))
					num += w * correct(at(k, c))
					den += w
				}
				rM[tt][c] = num / den
				if !r.MemoryParsed {
					rM[tt][c] -= f
				}
				pen := lambda * math.Min(1, math.Max(0, float64(r.MemoryChars)-L)/L)
				if pen > 0 {
					penalized++
				}
				rM[tt][c] -= pen
			}
		}
		// A = (r − mean) / (std + 1e-4), population std, per turn and phase.
		adv := func(rs []float64) []float64 {
			mean := 0.0
			for _, x := range rs {
				mean += x
			}
			mean /= float64(len(rs))
			v := 0.0
			for _, x := range rs {
				v += (x - mean) * (x - mean)
			}
			std := math.Sqrt(v / float64(len(rs)))
			out := make([]float64, len(rs))
			for i, x := range rs {
				if v > 0 {
					out[i] = (x - mean) / (std + 1e-4)
				}
			}
			return out
		}
		for tt := 0; tt < T; tt++ {
			aJ, aM := adv(rJ[tt]), adv(rM[tt])
			for c := 0; c < G; c++ {
				r := at(tt, c)
				for _, chk := range []struct {
					name      string
					got, want float64
				}{
					{"reward_judge", r.RewardJudge, rJ[tt][c]}, {"reward_memory", r.RewardMemory, rM[tt][c]},
					{"advantage_judge", r.AdvantageJudge, aJ[c]}, {"advantage_memory", r.AdvantageMemory, aM[c]},
				} {
					if math.Abs(chk.got-chk.want) > 1e-9 {
						t.Errorf("step %d %s turn %d chain %d: %s = %v, formula gives %v", r.Step, r.TrajectoryID, r.Turn, c, chk.name, chk.got, chk.want)
					}
				}
				if r.AdvantageJudge != 0 || r.AdvantageMemory != 0 {
					nonzero++
				}
			}
		}
	}
	if nonzero == 0 {
		t.Fatal("every advantage is zero: nothing was learned from")
	}
	if penalized == 0 {
		t.Fatal("no memory crossed the length threshold: the length penalty went untested")
	}
}

// weights reads a checkpoint's model.safetensors as named float32 slices.
func weights(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	ts, err := safetensors.ReadFloat32(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for k, v := range ts {
		out[k] = tensors.MustCopyFlatData[float32](v)
	}
	return out
}

// TestZeroAdvantageChangesNothing: when every output fails to parse (a
// one-token budget without structured decoding), all rewards of a group are
// equal, every advantage is zero, and with β = 0 the only change to the
// weights is AdamW's weight decay: θ ← θ − lr·wd·θ on matrices, nothing on
// vectors. A normal run, by contrast, changes the weights.
func TestZeroAdvantageChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	base := t.TempDir()
	init := microOptions(t, filepath.Join(base, "init"))
	init.Train.Steps = 1
	init.GRPO.LearningRate = 1e-9 // a step that changes nothing measurable: the initial weights
	init.Rollout.Structured = false
	init.Rollout.MaxMemoryTokens, init.Rollout.MaxJudgeTokens = 1, 1
	if _, err := Run(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	w0 := weights(t, filepath.Join(init.Out, "checkpoint-1"))

	for _, wd := range []float64{0, 0.1} {
		o := init
		o.Out = filepath.Join(base, fmt.Sprintf("wd%v", wd))
		o.Model.Path = filepath.Join(init.Out, "checkpoint-1")
		o.GRPO.LearningRate, o.GRPO.WeightDecay = 0.01, wd
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		for _, r := range readJSONL[rolloutRow](t, filepath.Join(o.Out, "rollouts.jsonl")) {
			if r.AdvantageJudge != 0 || r.AdvantageMemory != 0 || r.JudgeParsed || r.MemoryParsed {
				t.Fatalf("wd %v: a parsed output or a non-zero advantage: %+v", wd, r)
			}
		}
		w1 := weights(t, filepath.Join(o.Out, "checkpoint-1"))
		for name, a := range w0 {
			b := w1[name]
			decay := 0.0
			if !strings.Contains(name, "norm") { // rank ≥ 2 tensors decay
				decay = o.GRPO.LearningRate * wd
			}
			for i := range a {
				want := float64(a[i]) * (1 - decay)
				if math.Abs(float64(b[i])-want) > 1e-7*math.Max(1, math.Abs(want)) {
					t.Fatalf("wd %v: %s[%d] = %v, want %v (decay %v)", wd, name, i, b[i], want, decay)
				}
			}
		}
	}

	// With real advantages the weights move.
	o := microOptions(t, filepath.Join(base, "learn"))
	o.Model.Path = filepath.Join(init.Out, "checkpoint-1")
	o.Train.Steps = 1
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	w2 := weights(t, filepath.Join(o.Out, "checkpoint-1"))
	changed := 0
	for name, a := range w0 {
		for i := range a {
			if a[i] != w2[name][i] {
				changed++
			}
		}
	}
	if changed == 0 {
		t.Fatal("a step with non-zero advantages left every weight unchanged")
	}
}

// cancelAfter is a progress writer that cancels a run once it has reported
// step n: the test's Ctrl-C.
type cancelAfter struct {
	n      string
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), c.n) {
		c.cancel()
	}
	return len(p), nil
}

// TestResumeEqualsUninterrupted: a run interrupted after step 2 (it saves
// checkpoint-2) and resumed to step 3 ends with the same weights and the
// same metrics as a run of 3 steps straight.
func TestResumeEqualsUninterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	// Resume is exact whatever the checkpoint dtype: bfloat16 training keeps its float32
	// masters in optimizer.safetensors, and float32 training its weights when the checkpoint
	// rounds them.
	for _, c := range []struct{ model, checkpoint string }{
		{"float32", ""}, {"bfloat16", ""}, {"float32", "bfloat16"},
	} {
		t.Run(c.model+"/checkpoint="+c.checkpoint, func(t *testing.T) { testResume(t, c.model, c.checkpoint) })
	}
}

func testResume(t *testing.T, dtype, checkpointDType string) {
	base := t.TempDir()
	straight := microOptions(t, filepath.Join(base, "straight"))
	straight.Train.Steps = 3
	straight.Train.Trajectories = 1
	straight.GRPO.Beta = 0.04 // the reference model is rebuilt on resume
	straight.GRPO.NumIterations = 2
	straight.Model.DType, straight.Train.CheckpointDType = dtype, checkpointDType
	if dtype == "bfloat16" {
		// bfloat16 products are slow on the pure-Go backend: the synth tokenizer's 1,304-token
		// vocabulary (and its short prompts) instead of Qwen3's 151,936 keeps the LM head small.
		straight.Model.Tokenizer, straight.Model.VocabSize = "../assets/synth-tokenizer", 1645
		straight.Model.BOSTokenID, straight.Model.EOSTokenIDs = 1619, []int{1621}
		straight.Rollout.PromptVersion = "synth"
	}
	if _, err := Run(context.Background(), straight); err != nil {
		t.Fatal(err)
	}

	o := straight
	o.Out = filepath.Join(base, "resumed")
	ctx, cancel := context.WithCancel(context.Background())
	o.Progress = &cancelAfter{n: "step 2/3", cancel: cancel}
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stopped || res.Steps != 2 || filepath.Base(res.Checkpoint) != "checkpoint-2" {
		t.Fatalf("interrupted run: %+v", res)
	}
	o.Progress, o.Resume = nil, true
	if res, err = Run(context.Background(), o); err != nil || res.Steps != 3 {
		t.Fatalf("resumed run: %+v, %v", res, err)
	}

	a, b := weights(t, filepath.Join(straight.Out, "checkpoint-3")), weights(t, filepath.Join(o.Out, "checkpoint-3"))
	for name, x := range a {
		for i := range x {
			if x[i] != b[name][i] {
				t.Fatalf("%s[%d]: straight %v, resumed %v", name, i, x[i], b[name][i])
			}
		}
	}
	clean := func(ms []Metrics) []Metrics {
		for i := range ms {
			ms[i].TokensPerSecond, ms[i].RolloutSeconds, ms[i].UpdateSeconds, ms[i].Seconds, ms[i].Elapsed = 0, 0, 0, 0, 0
		}
		return ms
	}
	ma := clean(readJSONL[Metrics](t, filepath.Join(straight.Out, "metrics.jsonl")))
	mb := clean(readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl")))
	ja, _ := json.Marshal(ma)
	jb, _ := json.Marshal(mb)
	if len(ma) != 3 || string(ja) != string(jb) {
		t.Fatalf("metrics differ:\nstraight %s\nresumed  %s", ja, jb)
	}
	// The model moved away from the reference before the interruption, so a
	// wrong reference after the resume would have shown in step 3's KL.
	if !(ma[2].KL > 0) {
		t.Fatalf("step 3 KL %v: the test cannot tell the reference apart from the model", ma[2].KL)
	}
}

// TestFailsFast: bad settings and inputs are refused before any step runs,
// and nothing is written into the output directory.
func TestFailsFast(t *testing.T) {
	cases := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"unknown best metric", func(o *Options) {
			o.Train.EvalEvery, o.Train.BestMetric, o.Metrics = 1, "F1", []string{"f1", "asr"}
			o.Evaluate = func(context.Context, *model.Model, *rollout.Guard, int, string) (map[string]any, error) {
				return nil, nil
			}
		}, `train.best_metric "F1": not a metric`},
		{"eval data missing", func(o *Options) {
			o.Train.EvalEvery, o.Train.EvalData = 1, "testdata/nope.jsonl"
			o.Evaluate = func(context.Context, *model.Model, *rollout.Guard, int, string) (map[string]any, error) {
				return nil, nil
			}
		}, "train.eval_data"},
		{"eval data without an action", func(o *Options) {
			o.Train.EvalEvery, o.Train.EvalData = 1, "testdata/no-actions.jsonl"
			o.Evaluate = func(context.Context, *model.Model, *rollout.Guard, int, string) (map[string]any, error) {
				return nil, nil
			}
		}, "nothing to evaluate: 1 trajectories, none with an action"},
		{"eval without an evaluator", func(o *Options) { o.Train.EvalEvery = 1 }, "no evaluator"},
		{"model path missing", func(o *Options) { o.Model.Path = "testdata/no-such-model" }, "model.path"},
		{"data with one label only", func(o *Options) { o.Train.Data = "testdata/benign-only.jsonl" }, "needs actions of both labels"},
		{"tokenizer missing", func(o *Options) { o.Model.Tokenizer = "testdata/no-tokenizer" }, "model.tokenizer"},
		{"a remote generator", func(o *Options) {
			o.Rollout.Generator, o.Rollout.Endpoint = rollout.GeneratorOpenAI, "http://127.0.0.1:8000/v1"
		}, "training needs the local model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := microOptions(t, filepath.Join(t.TempDir(), "out"))
			o.ResolvedConfig = []byte("x: 1\n")
			c.edit(&o)
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(o.Out, "config.yaml")); err == nil {
				t.Fatal("a failed start wrote config.yaml")
			}
		})
	}
}
