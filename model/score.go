package model

// Scoring: what `mageguard model score` computes, the scores the PyTorch
// reference cases in model/testdata report (docs/model.md); the command
// reads their inputs.json and writes their expected.json format.

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// ScoreOptions say what Score reports beyond the scores of every position;
// the json names are those of the reference cases' inputs.json.
type ScoreOptions struct {
	MaxNewTokens int `json:"max_new_tokens"` // greedy tokens per sequence
	NLastLogits  int `json:"n_last_logits"`  // full logits rows reported for the last positions
	PadTokenID   int `json:"pad_token_id"`   // id of the right padding in the batch
}

// DefaultScoreOptions are the reference's defaults: 8 greedy tokens, the
// logits rows of the last 3 positions, padding id 0.
func DefaultScoreOptions() ScoreOptions {
	return ScoreOptions{MaxNewTokens: 8, NLastLogits: 3}
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

// Score runs the token sequences seqs as one right-padded batch (logits
// at every position) and greedy-decodes opts.MaxNewTokens tokens after each
// with the KV cache, reporting what the reference cases report, one
// ScoreSequence per sequence.
func (m *Model) Score(seqs [][]int, opts ScoreOptions) ([]ScoreSequence, error) {
	if len(seqs) == 0 {
		return nil, fmt.Errorf("score: no sequences")
	}
	V := m.cfg.VocabSize
	L := 0
	for i, s := range seqs {
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
	if opts.PadTokenID < 0 || opts.PadTokenID >= V {
		return nil, fmt.Errorf("score: pad_token_id %d outside the vocabulary [0, %d)", opts.PadTokenID, V)
	}
	B := len(seqs)
	tokens := make([][]int32, B)
	mask := make([][]int32, B)
	for b, s := range seqs {
		tokens[b] = make([]int32, L)
		mask[b] = make([]int32, L)
		for j := range tokens[b] {
			tokens[b][j] = int32(opts.PadTokenID)
		}
		for j, id := range s {
			tokens[b][j], mask[b][j] = int32(id), 1
		}
	}
	stats, err := m.scoreStats(tokens, mask, opts.NLastLogits)
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	out := make([]ScoreSequence, 0, B)
	for b, s := range seqs {
		n := len(s)
		// Empty lists (not null) where the reference has [] (e.g. the log-probs of a 1-token sequence).
		seq := ScoreSequence{InputIDs: append([]int{}, s...), Length: n,
			Argmax: []int{}, ArgmaxMargin: []float64{}, Logsumexp: []float64{}, NextTokenLogprobs: []float64{},
			LastLogitsPositions: []int{}, LastLogits: [][]float32{},
			GreedyNewTokens: []int{}, GreedyMargins: []float64{}, GreedyLogprobs: []float64{}}
		for t := 0; t < n; t++ {
			p := stats.at[b][t]
			seq.Argmax = append(seq.Argmax, p.argmax)
			seq.ArgmaxMargin = append(seq.ArgmaxMargin, p.margin)
			seq.Logsumexp = append(seq.Logsumexp, p.lse)
			if t+1 < n {
				seq.NextTokenLogprobs = append(seq.NextTokenLogprobs, p.next-p.lse)
			}
		}
		for i, t := range lastPositions(n, opts.NLastLogits) {
			seq.LastLogitsPositions = append(seq.LastLogitsPositions, t)
			seq.LastLogits = append(seq.LastLogits, stats.last[b][i])
		}
		out = append(out, seq)
	}
	if opts.MaxNewTokens > 0 {
		gen := GenerateOptions{MaxNewTokens: opts.MaxNewTokens}
		gen.observe = func(row, _ int, lp []float32) {
			_, margin := top2(lp) // log-probs differ from logits by a constant: same margin
			out[row].GreedyMargins = append(out[row].GreedyMargins, margin)
		}
		gens, err := m.Generate(seqs, gen)
		if err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
		for i, g := range gens {
			out[i].GreedyNewTokens = append(out[i].GreedyNewTokens, g.Tokens...)
			for _, lp := range g.LogProbs {
				out[i].GreedyLogprobs = append(out[i].GreedyLogprobs, float64(lp))
			}
		}
	}
	return out, nil
}

// positionStats are the scores of one position: the argmax of its logits
// and the gap to the second largest, their log-sum-exp, and the logit of
// the next token of the sequence (0 at the last position).
type positionStats struct {
	argmax      int
	margin, lse float64
	next        float64
}

// scoreResult holds positionStats [B][L] and the full logits rows of each
// sequence's last positions [B][k][V] (lastPositions).
type scoreResult struct {
	at   [][]positionStats
	last [][][]float32
}

// lastPositions returns the last k positions of a sequence of n tokens.
func lastPositions(n, k int) []int {
	var out []int
	for t := max(0, n-k); t < n; t++ {
		out = append(out, t)
	}
	return out
}

// scoreStats scores the right-padded batch tokens, mask [B][L]: the whole
// [B, L, V] logits on the host when the LM head is not chunked; otherwise
// a graph that keeps per position only what Score reports, with the full
// rows only at the last nLast positions of each row.
func (m *Model) scoreStats(tokens, mask [][]int32, nLast int) (*scoreResult, error) {
	B, L, V := len(tokens), len(tokens[0]), m.cfg.VocabSize
	res := &scoreResult{at: make([][]positionStats, B), last: make([][][]float32, B)}
	lengths := make([]int, B)
	for b := range B {
		res.at[b] = make([]positionStats, L)
		for _, x := range mask[b] {
			lengths[b] += int(x)
		}
	}
	next := func(b, t int) int { // the next token, or the pad at the last position
		return int(tokens[b][min(t+1, L-1)])
	}
	if !m.chunked() {
		e, err := m.logitsExec()
		if err != nil {
			return nil, err
		}
		out, err := execRecover(e, tokens, mask)
		if err != nil {
			return nil, fmt.Errorf("forward: %w", err)
		}
		defer out[0].FinalizeAll()
		err = tensors.ConstFlatData(out[0], func(flat []float32) {
			for b := range B {
				for t := range lengths[b] {
					row := flat[(b*L+t)*V : (b*L+t+1)*V]
					arg, margin := top2(row)
					res.at[b][t] = positionStats{argmax: arg, margin: margin, lse: logSumExp64(row), next: float64(row[next(b, t)])}
				}
				for _, t := range lastPositions(lengths[b], nLast) {
					res.last[b] = append(res.last[b], append([]float32(nil), flat[(b*L+t)*V:(b*L+t+1)*V]...))
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("reading logits: %w", err)
		}
		return res, nil
	}

	// Chunked: the last nLast positions of each row (repeated when shorter), and the next tokens.
	k := max(nLast, 1)
	lastPos, nextTok := make([][]int32, B), make([][]int32, B)
	for b := range B {
		pos := lastPositions(lengths[b], k)
		for len(pos) < k {
			pos = append(pos, pos[len(pos)-1])
		}
		for _, t := range pos {
			lastPos[b] = append(lastPos[b], int32(t))
		}
		nextTok[b] = make([]int32, L)
		for t := range L {
			nextTok[b][t] = int32(next(b, t))
		}
	}
	e, err := m.scoreExec()
	if err != nil {
		return nil, err
	}
	out, err := execRecover(e, tokens, mask, nextTok, lastPos)
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	defer func() {
		for _, o := range out {
			o.FinalizeAll()
		}
	}()
	argmax := tensors.MustCopyFlatData[int32](out[0])
	margin, lse, nextZ := tensors.MustCopyFlatData[float32](out[1]), tensors.MustCopyFlatData[float32](out[2]), tensors.MustCopyFlatData[float32](out[3])
	last := tensors.MustCopyFlatData[float32](out[4])
	for b := range B {
		for t := range lengths[b] {
			i := b*L + t
			res.at[b][t] = positionStats{argmax: int(argmax[i]), margin: float64(margin[i]), lse: float64(lse[i]), next: float64(nextZ[i])}
		}
		for j := range lastPositions(lengths[b], nLast) {
			i := b*k + j
			res.last[b] = append(res.last[b], append([]float32(nil), last[i*V:(i+1)*V]...))
		}
	}
	return res, nil
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
		return nil, err
	}
	e.SetMaxCache(unboundedGraphs)
	m.logits = e
	return e, nil
}

// scoreExec returns the executable of scoreGraph (compiled per batch shape).
func (m *Model) scoreExec() (*context.Exec, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.score != nil {
		return m.score, nil
	}
	e, err := context.NewExec(m.backend, m.ctx, m.scoreGraph)
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(unboundedGraphs)
	m.score = e
	return e, nil
}

// scoreGraph: tokens, mask, next [B, L] int32 (next[b, t]: the token whose
// logit to report at t), last [B, k] int32 (positions) → argmax [B, L]
// int32, margin, lse, logit of next [B, L] float32, logits at last
// [B·k, V] float32; the LM head over vocabulary chunks (running top two,
// maximum and log-sum-exp).
func (m *Model) scoreGraph(ctx *context.Context, tokens, mask, next, last *Node) []*Node {
	g := tokens.Graph()
	B, L := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	k := last.Shape().Dimensions[1]
	H := m.cfg.HiddenSize
	h := m.Hidden(ctx, ConvertDType(tokens, dtypes.Int32), mask) // [B, L, H]
	hf := Reshape(h, B*L, H)
	w := m.lmWeight(ctx, g)
	var st headStats
	var best, second, arg *Node // running top two [B·L] and the best's id
	for _, c := range m.chunks() {
		z := chunkLogits(after(hf, st.max), w, c[0], c[1], nil) // [B·L, C]
		st = st.add(z, false)
		top := ReduceMax(z, -1)
		at := ArgMax(z, -1, dtypes.Int32) // first index of the maximum
		rest := Where(Equal(Iota(g, z.Shape(), 1), ExpandDims(ConvertDType(at, dtypes.Float32), -1)),
			BroadcastToDims(Scalar(g, dtypes.Float32, math.Inf(-1)), z.Shape().Dimensions...), z)
		next2 := ReduceMax(rest, -1)
		at = AddScalar(at, float64(c[0]))
		if best == nil {
			best, second, arg = top, next2, at
			continue
		}
		wins := GreaterThan(top, best) // ties keep the earlier chunk's (smaller) id
		second = Where(wins, Max(best, next2), Max(second, top))
		arg = Where(wins, at, arg)
		best = Where(wins, top, best)
	}
	nextZ := targetLogits(hf, w, Reshape(ConvertDType(next, dtypes.Int32), B*L), 1)
	rows := Iota(g, shapes.Make(dtypes.Int32, B, k), 0)
	hl := Gather(h, Stack([]*Node{rows, ConvertDType(last, dtypes.Int32)}, -1)) // [B, k, H]
	lastZ, _ := m.headLogits(ctx, Reshape(hl, B*k, H), nil)
	return []*Node{Reshape(arg, B, L), Reshape(Sub(best, second), B, L), Reshape(st.lse(), B, L), Reshape(nextZ, B, L), lastZ}
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
