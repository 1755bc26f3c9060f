package model

// Scoring: what `mageguard model score` computes, in the format of the
// reference cases' expected.json (../shared/reference/qwen3/cases).

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// ScoreInput is an inputs.json of the reference cases.
type ScoreInput struct {
	Sequences    [][]int `json:"sequences"`      // token ids, one list per sequence
	MaxNewTokens int     `json:"max_new_tokens"` // greedy tokens per sequence (default 8)
	NLastLogits  int     `json:"n_last_logits"`  // full logits rows reported for the last positions (default 3)
	PadTokenID   int     `json:"pad_token_id"`   // id of the right padding in the batch (default 0)
}

// ReadScoreInput reads an inputs.json, with the reference's defaults for absent keys.
func ReadScoreInput(path string) (*ScoreInput, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("score input: %w", err)
	}
	in := &ScoreInput{MaxNewTokens: 8, NLastLogits: 3}
	if err := json.Unmarshal(data, in); err != nil {
		return nil, fmt.Errorf("score input %s: %w", path, err)
	}
	if len(in.Sequences) == 0 {
		return nil, fmt.Errorf("score input %s: sequences: want at least one sequence", path)
	}
	return in, nil
}

// ScoreSequence holds the results for one sequence; the fields and their
// lengths are those of the reference's expected.json.
type ScoreSequence struct {
	InputIDs            []int       `json:"input_ids"`
	Length              int         `json:"length"`
	Argmax              []int       `json:"argmax"`              // argmax of the logits at every position
	ArgmaxMargin        []float64   `json:"argmax_margin"`       // top-1 minus top-2 logit at every position
	Logsumexp           []float64   `json:"logsumexp"`           // log-sum-exp of the logits at every position
	NextTokenLogprobs   []float64   `json:"next_token_logprobs"` // log_softmax(logits[t])[ids[t+1]], t = 0..len-2
	LastLogitsPositions []int       `json:"last_logits_positions"`
	LastLogits          [][]float32 `json:"last_logits"`       // full logits rows at LastLogitsPositions
	GreedyNewTokens     []int       `json:"greedy_new_tokens"` // greedy continuation with the KV cache
	GreedyMargins       []float64   `json:"greedy_margins"`    // top-1 minus top-2 at each greedy step
	GreedyLogprobs      []float64   `json:"greedy_logprobs"`   // log-prob of each greedy token
}

// ScoreOutput is the expected.json-shaped result of Score.
type ScoreOutput struct {
	Format    string          `json:"format"`
	Generator string          `json:"generator"`
	Sequences []ScoreSequence `json:"sequences"`
}

// Score runs the sequences as one right-padded batch (logits at every
// position) and greedy-decodes MaxNewTokens tokens after each with the KV
// cache, reporting what the reference cases report.
func (m *Model) Score(in *ScoreInput) (*ScoreOutput, error) {
	V := m.cfg.VocabSize
	L := 0
	for i, s := range in.Sequences {
		if len(s) == 0 {
			return nil, fmt.Errorf("score: sequence %d is empty", i)
		}
		for j, id := range s {
			if id < 0 || id >= V {
				return nil, fmt.Errorf("score: sequence %d token %d: id %d outside the vocabulary [0, %d)", i, j, id, V)
			}
		}
		L = max(L, len(s))
	}
	if in.PadTokenID < 0 || in.PadTokenID >= V {
		return nil, fmt.Errorf("score: pad_token_id %d outside the vocabulary [0, %d)", in.PadTokenID, V)
	}
	B := len(in.Sequences)
	tokens := make([][]int32, B)
	mask := make([][]int32, B)
	for b, s := range in.Sequences {
		tokens[b] = make([]int32, L)
		mask[b] = make([]int32, L)
		for j := range tokens[b] {
			tokens[b][j] = int32(in.PadTokenID)
		}
		for j, id := range s {
			tokens[b][j], mask[b][j] = int32(id), 1
		}
	}
	e, err := m.logitsExec()
	if err != nil {
		return nil, err
	}
	res, err := execRecover(e, tokens, mask)
	if err != nil {
		return nil, fmt.Errorf("score: forward: %w", err)
	}
	logits := res[0]
	defer logits.FinalizeAll()

	out := &ScoreOutput{Format: "qwen3-ref-expected-v1", Generator: "mageguard model score (GoMLX)"}
	err = tensors.ConstFlatData(logits, func(flat []float32) {
		for b, s := range in.Sequences {
			n := len(s)
			// Empty lists (not null) where the reference has [] (e.g. the log-probs of a 1-token sequence).
			seq := ScoreSequence{InputIDs: append([]int{}, s...), Length: n,
				Argmax: []int{}, ArgmaxMargin: []float64{}, Logsumexp: []float64{}, NextTokenLogprobs: []float64{},
				LastLogitsPositions: []int{}, LastLogits: [][]float32{},
				GreedyNewTokens: []int{}, GreedyMargins: []float64{}, GreedyLogprobs: []float64{}}
			for t := 0; t < n; t++ {
				row := flat[(b*L+t)*V : (b*L+t+1)*V]
				arg, margin := top2(row)
				lse := logSumExp64(row)
				seq.Argmax = append(seq.Argmax, arg)
				seq.ArgmaxMargin = append(seq.ArgmaxMargin, margin)
				seq.Logsumexp = append(seq.Logsumexp, lse)
				if t+1 < n {
					seq.NextTokenLogprobs = append(seq.NextTokenLogprobs, float64(row[s[t+1]])-lse)
				}
			}
			for t := max(0, n-in.NLastLogits); t < n; t++ {
				seq.LastLogitsPositions = append(seq.LastLogitsPositions, t)
				seq.LastLogits = append(seq.LastLogits, append([]float32(nil), flat[(b*L+t)*V:(b*L+t+1)*V]...))
			}
			out.Sequences = append(out.Sequences, seq)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("score: reading logits: %w", err)
	}
	if in.MaxNewTokens > 0 {
		opts := GenerateOptions{MaxNewTokens: in.MaxNewTokens}
		opts.observe = func(row, _ int, lp []float32) {
			_, margin := top2(lp) // log-probs differ from logits by a constant: same margin
			out.Sequences[row].GreedyMargins = append(out.Sequences[row].GreedyMargins, margin)
		}
		gens, err := m.Generate(in.Sequences, opts)
		if err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
		for i, g := range gens {
			out.Sequences[i].GreedyNewTokens = append(out.Sequences[i].GreedyNewTokens, g.Tokens...)
			for _, lp := range g.LogProbs {
				out.Sequences[i].GreedyLogprobs = append(out.Sequences[i].GreedyLogprobs, float64(lp))
			}
		}
	}
	return out, nil
}

// logitsExec returns the executable of Logits (compiled per batch shape).
func (m *Model) logitsExec() (*context.Exec, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logits != nil {
		return m.logits, nil
	}
	e, err := context.NewExec(m.backend, m.ctx, func(ctx *context.Context, tokens, mask *Node) *Node {
		return m.Logits(ctx, tokens, mask)
	})
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	m.logits = e
	return e, nil
}

// top2 returns the argmax of x (first index on ties) and the gap between
// the largest and the second largest value.
func top2(x []float32) (int, float64) {
	best, second := 0, math.Inf(-1)
	for i := 1; i < len(x); i++ {
		switch v := float64(x[i]); {
		case v > float64(x[best]):
			second = float64(x[best])
			best = i
		case v > second:
			second = v
		}
	}
	return best, float64(x[best]) - second
}

// logSumExp64 is log Σ exp(x) evaluated in float64.
func logSumExp64(x []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s)
}
