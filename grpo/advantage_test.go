package grpo

import (
	"math"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/rewards"
)

func TestGroupAdvantages(t *testing.T) {
	cases := []struct {
		name    string
		rewards []float64
		scale   string
		want    []float64 // hand-computed
	}{
		// mean 0.5, population std 0.5: ±0.5/(0.5 + 1e-4).
		{"two right two wrong", []float64{1, 0, 0, 1}, ScaleGroup, []float64{0.5 / 0.5001, -0.5 / 0.5001, -0.5 / 0.5001, 0.5 / 0.5001}},
		{"Dr. GRPO keeps the scale", []float64{1, 0, 0, 1}, ScaleNone, []float64{0.5, -0.5, -0.5, 0.5}},
		// mean 0.5, variance (1.5² + 3·0.5²)/4 = 0.75 (population, not 1.0 = sample).
		{"one of four", []float64{2, 0, 0, 0}, ScaleGroup, []float64{
			1.5 / (math.Sqrt(0.75) + 1e-4), -0.5 / (math.Sqrt(0.75) + 1e-4), -0.5 / (math.Sqrt(0.75) + 1e-4), -0.5 / (math.Sqrt(0.75) + 1e-4)}},
		{"all equal", []float64{1, 1, 1}, ScaleGroup, []float64{0, 0, 0}},
		// 0.1 three times: a computed mean could differ from 0.1 in the last bit; the result is exactly 0.
		{"all equal, inexact", []float64{0.1, 0.1, 0.1}, ScaleGroup, []float64{0, 0, 0}},
		{"all equal, no scaling", []float64{-1.1, -1.1}, ScaleNone, []float64{0, 0}},
		{"one chain", []float64{0.7}, ScaleGroup, []float64{0}},
		{"empty", nil, ScaleGroup, []float64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := GroupAdvantages(c.rewards, c.scale)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if math.Abs(got[i]-c.want[i]) > 1e-12 {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestGroupAdvantagesErrors(t *testing.T) {
	if _, err := GroupAdvantages([]float64{1, math.NaN()}, ScaleGroup); err == nil || !strings.Contains(err.Error(), "reward 1 is NaN") {
		t.Errorf("NaN reward: error %v", err)
	}
	if _, err := GroupAdvantages([]float64{1}, "batch"); err == nil || !strings.Contains(err.Error(), `scale_rewards must be group or none, got "batch"`) {
		t.Errorf("bad scale: error %v", err)
	}
}

// TestTurnAdvantagesGroupsPerTurn checks that each turn is its own group: turn 0's rewards
// are all equal (advantages 0) even though they differ from turn 1's.
func TestTurnAdvantagesGroupsPerTurn(t *testing.T) {
	got, err := TurnAdvantages([][]float64{{1, 1}, {0, 1}}, ScaleNone)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{0, 0}, {-0.5, 0.5}}
	for tt := range want {
		for i := range want[tt] {
			if got[tt][i] != want[tt][i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
	}
	if _, err := TurnAdvantages([][]float64{{1}, {math.Inf(1)}}, ScaleGroup); err == nil || !strings.HasPrefix(err.Error(), "turn 1:") {
		t.Errorf("error %v, want it to name turn 1", err)
	}
}

func TestLearningRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps = 1, 4
	const total = 14 // 4 warm-up steps, then 10 decay steps
	cases := []struct {
		schedule string
		step     int
		want     float64 // by hand
	}{
		{ScheduleConstant, 0, 0.25}, // (0+1)/4
		{ScheduleConstant, 3, 1},
		{ScheduleConstant, 100, 1},
		{ScheduleLinear, 1, 0.5},
		{ScheduleLinear, 4, 1},    // p = 0
		{ScheduleLinear, 9, 0.5},  // p = 5/10
		{ScheduleLinear, 13, 0.1}, // p = 9/10: the last step still moves
		{ScheduleLinear, 14, 0},
		{ScheduleCosine, 4, 1},
		{ScheduleCosine, 9, 0.5},                              // (1 + cos(π/2))/2
		{ScheduleCosine, 6, (1 + math.Cos(math.Pi*0.2)) / 2},  // p = 2/10
		{ScheduleCosine, 13, (1 + math.Cos(math.Pi*0.9)) / 2}, // p = 9/10
		{ScheduleCosine, 20, 0},                               // past the end
	}
	for _, c := range cases {
		cfg.LRSchedule = c.schedule
		if got := LearningRate(cfg, c.step, total); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s step %d: lr %v, want %v", c.schedule, c.step, got, c.want)
		}
	}
	cfg.WarmupSteps, cfg.LRSchedule = 0, ScheduleLinear
	if got := LearningRate(cfg, 0, 10); got != 1 {
		t.Errorf("no warm-up, step 0: lr %v, want 1", got)
	}
}

// TestPhaseAdvantages runs rewards.Compute and PhaseAdvantages on a hand-computed trajectory:
// labels 0, 1; chain 0 approves both turns (c = 1, 0), chain 1 approves then rejects (c = 1, 1).
// γ = 0.5: r^M turn 0 = (1 + 0.5·0)/1.5 = 2/3 and (1 + 0.5)/1.5 = 1; turn 1 = c.
// r^J = c. With scale none, turn 0: memory −1/6, +1/6 but judge 0, 0 (equal rewards);
// turn 1: both phases −0.5, +0.5.
func TestPhaseAdvantages(t *testing.T) {
	ok := func(reject bool) rewards.Outcome {
		return rewards.Outcome{MemoryParsed: true, MemoryChars: 1, JudgeParsed: true, Reject: reject}
	}
	r, err := rewards.Compute(rewards.DefaultConfig(), []int{0, 1}, [][]rewards.Outcome{
		{ok(false), ok(false)},
		{ok(false), ok(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	mem, judge, err := PhaseAdvantages(r, ScaleNone)
	if err != nil {
		t.Fatal(err)
	}
	wantMem := [][]float64{{-1.0 / 6, 1.0 / 6}, {-0.5, 0.5}}
	wantJudge := [][]float64{{0, 0}, {-0.5, 0.5}}
	for tt := range 2 {
		for i := range 2 {
			if math.Abs(mem[tt][i]-wantMem[tt][i]) > 1e-12 || math.Abs(judge[tt][i]-wantJudge[tt][i]) > 1e-12 {
				t.Fatalf("memory %v judge %v, want %v and %v", mem, judge, wantMem, wantJudge)
			}
		}
	}
}

// TestMaliciousWeightAndScaling: a class-weighted judge reward (rewards.malicious_weight w₁)
// multiplies a label-1 turn's judge rewards by w₁ when every call parses. With scale_rewards
// none the turn's judge advantages are then w₁ times the unweighted ones; with group the
// standard deviation is scaled too, so they are the same up to the std's 1e-4. Label-0 turns
// are unchanged either way.
func TestMaliciousWeightAndScaling(t *testing.T) {
	labels := []int{0, 1}
	outcomes := [][]rewards.Outcome{ // [turn][chain]: chains 0, 1 approve at turn 1, chains 2, 3 reject
		{{MemoryParsed: true, JudgeParsed: true}, {MemoryParsed: true, JudgeParsed: true, Reject: true},
			{MemoryParsed: true, JudgeParsed: true}, {MemoryParsed: true, JudgeParsed: true}},
		{{MemoryParsed: true, JudgeParsed: true}, {MemoryParsed: true, JudgeParsed: true},
			{MemoryParsed: true, JudgeParsed: true, Reject: true}, {MemoryParsed: true, JudgeParsed: true, Reject: true}},
	}
	judgeAdv := func(w float64, scale string) [][]float64 {
		cfg := rewards.DefaultConfig()
		cfg.MaliciousWeight = w
		r, err := rewards.Compute(cfg, labels, outcomes)
		if err != nil {
			t.Fatal(err)
		}
		_, adv, err := PhaseAdvantages(r, scale)
		if err != nil {
			t.Fatal(err)
		}
		return adv
	}
	for _, scale := range []string{ScaleNone, ScaleGroup} {
		one, three := judgeAdv(1, scale), judgeAdv(3, scale)
		for i := range one[1] {
			want := one[1][i]
			if scale == ScaleNone {
				want *= 3
			}
			if math.Abs(three[1][i]-want) > 1e-3*math.Abs(want) {
				t.Errorf("%s: label-1 turn, chain %d: advantage %v with w1 = 3, want %v", scale, i, three[1][i], want)
			}
			if three[0][i] != one[0][i] {
				t.Errorf("%s: label-0 turn, chain %d: advantage %v with w1 = 3, %v without", scale, i, three[0][i], one[0][i])
			}
		}
		if one[1][0] >= 0 || one[1][2] <= 0 {
			t.Errorf("%s: approving a malicious action has advantage %v, rejecting it %v", scale, one[1][0], one[1][2])
		}
	}
}
