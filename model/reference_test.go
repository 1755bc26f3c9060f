package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/mageguard/mageguard/model/backend"
)

var (
	testBackendOnce sync.Once
	testBackendVal  backends.Backend
	testBackendErr  error
)

// testBackend is the pure-Go backend shared by the tests and benchmarks,
// built after applying its process settings (GC percent, memory limit) as
// cmd/mageguard does, so that they run as the commands do.
func testBackend(t testing.TB) backends.Backend {
	t.Helper()
	testBackendOnce.Do(func() {
		cfg := backend.Default()
		cfg.ProcessSettings().Apply()
		testBackendVal, testBackendErr = backend.New(cfg)
	})
	if testBackendErr != nil {
		t.Fatal(testBackendErr)
	}
	return testBackendVal
}

// referenceCases are the reference Qwen3 cases in testdata (testdata/README.md).
var referenceCases = []string{"p1_tied_f32", "p2_untied_bf16_sharded"}

// expectedFile is the part of a reference expected.json the comparison reads.
type expectedFile struct {
	Tolerance struct {
		LogitsAbs  float64 `json:"logits_abs"`
		LogprobAbs float64 `json:"logprob_abs"`
	} `json:"tolerance"`
	Sequences []ScoreSequence `json:"sequences"`
}

// scoreInputs is a reference case's inputs.json, the input of `mageguard
// model score`.
type scoreInputs struct {
	Sequences [][]int `json:"sequences"`
	ScoreOptions
}

// readInputs reads an inputs.json, with the reference's defaults for absent keys.
func readInputs(t *testing.T, path string) *scoreInputs {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in := &scoreInputs{ScoreOptions: DefaultScoreOptions()}
	if err := json.Unmarshal(data, in); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return in
}

func readExpected(t *testing.T, path string) *expectedFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e expectedFile
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &e
}

// compareScores compares got with the reference ref as the cases'
// expected.json says to: every array as long as the reference's; |Δ| of
// last_logits and logsumexp ≤ atolLogits, of next_token_logprobs ≤
// atolLogprob; argmax equal where the reference margin exceeds
// 2·atolLogits; greedy tokens identical. It returns the worst
// differences and the list of failures.
func compareScores(ref *expectedFile, got []ScoreSequence, atolLogits, atolLogprob float64) (worstL, worstP float64, fails []string) {
	if len(ref.Sequences) != len(got) {
		fails = append(fails, fmt.Sprintf("sequence counts differ: %d vs %d", len(ref.Sequences), len(got)))
	}
	for i := 0; i < min(len(ref.Sequences), len(got)); i++ {
		a, b := ref.Sequences[i], got[i]
		if !slices.Equal(a.InputIDs, b.InputIDs) {
			fails = append(fails, fmt.Sprintf("seq %d: input_ids differ", i))
			continue
		}
		if len(a.LastLogits) != len(b.LastLogits) {
			fails = append(fails, fmt.Sprintf("seq %d: last_logits has %d rows, want %d", i, len(b.LastLogits), len(a.LastLogits)))
		} else {
			for r := range a.LastLogits {
				if len(a.LastLogits[r]) != len(b.LastLogits[r]) {
					fails = append(fails, fmt.Sprintf("seq %d: last_logits row %d has %d values, want %d", i, r, len(b.LastLogits[r]), len(a.LastLogits[r])))
					continue
				}
				for j := range a.LastLogits[r] {
					worstL = math.Max(worstL, math.Abs(float64(a.LastLogits[r][j])-float64(b.LastLogits[r][j])))
				}
			}
		}
		check := func(name string, x, y []float64, worst *float64) {
			if len(x) != len(y) {
				fails = append(fails, fmt.Sprintf("seq %d: %s has %d values, want %d", i, name, len(y), len(x)))
				return
			}
			for j := range x {
				*worst = math.Max(*worst, math.Abs(x[j]-y[j]))
			}
		}
		check("next_token_logprobs", a.NextTokenLogprobs, b.NextTokenLogprobs, &worstP)
		check("logsumexp", a.Logsumexp, b.Logsumexp, &worstL)
		if !slices.Equal(a.LastLogitsPositions, b.LastLogitsPositions) {
			fails = append(fails, fmt.Sprintf("seq %d: last_logits_positions %v, want %v", i, b.LastLogitsPositions, a.LastLogitsPositions))
		}
		if len(a.Argmax) != len(b.Argmax) {
			fails = append(fails, fmt.Sprintf("seq %d: argmax has %d values, want %d", i, len(b.Argmax), len(a.Argmax)))
		} else {
			for t := range a.Argmax {
				if a.Argmax[t] != b.Argmax[t] && a.ArgmaxMargin[t] > 2*atolLogits {
					fails = append(fails, fmt.Sprintf("seq %d pos %d: argmax %d, want %d (margin %g)", i, t, b.Argmax[t], a.Argmax[t], a.ArgmaxMargin[t]))
				}
			}
		}
		if !slices.Equal(a.GreedyNewTokens, b.GreedyNewTokens) {
			fails = append(fails, fmt.Sprintf("seq %d: greedy %v, want %v", i, b.GreedyNewTokens, a.GreedyNewTokens))
		}
	}
	if worstL > atolLogits {
		fails = append(fails, fmt.Sprintf("max |Δ logits| = %.3g > %g", worstL, atolLogits))
	}
	if worstP > atolLogprob {
		fails = append(fails, fmt.Sprintf("max |Δ next-token log-prob| = %.3g > %g", worstP, atolLogprob))
	}
	return worstL, worstP, fails
}

// TestReferenceCases scores both reference cases (a tied float32 checkpoint
// and an untied bfloat16 one in two shards) and compares with the
// independent PyTorch reference's expected.json at its tolerance (1e-4),
// with the LM head over the whole vocabulary (512) and over chunks of 100
// (the last one 12 rows): scores and greedy generation.
func TestReferenceCases(t *testing.T) {
	for _, name := range referenceCases {
		for _, chunk := range []int{0, 100} {
			t.Run(fmt.Sprintf("%s/lm_head_chunk=%d", name, chunk), func(t *testing.T) {
				dir := filepath.Join("testdata", name)
				m, err := Load(testBackend(t), filepath.Join(dir, "ckpt"))
				if err != nil {
					t.Fatal(err)
				}
				m.SetLMHeadChunk(chunk)
				m.generationChunkBytes = 1 // generation's head over the chunks too
				in := readInputs(t, filepath.Join(dir, "inputs.json"))
				got, err := m.Score(in.Sequences, in.ScoreOptions)
				if err != nil {
					t.Fatal(err)
				}
				ref := readExpected(t, filepath.Join(dir, "expected.json"))
				if ref.Tolerance.LogitsAbs != 1e-4 || ref.Tolerance.LogprobAbs != 1e-4 {
					t.Fatalf("reference tolerance %+v, want 1e-4", ref.Tolerance)
				}
				worstL, worstP, fails := compareScores(ref, got, ref.Tolerance.LogitsAbs, ref.Tolerance.LogprobAbs)
				for _, f := range fails {
					t.Error(f)
				}
				t.Logf("max |Δ logits| = %.3g, max |Δ log-prob| = %.3g", worstL, worstP)
			})
		}
	}
}
