package model

// Batched generation: Generate continues prompts token by token, picking
// each row's next token on the host from the [B, V] logits / temperature and
// their logsumexp that each step brings back (log-prob = z - lse, the same
// formula and graph code as TokenLogProbs): greedy, or temperature with
// optional top-k / top-p. The constraint hook costs nothing in the graph: a
// forced token is O(1), an allowed set O(|set|), a banned set one O(V)
// pass, all on the host; the price paid by every step, constrained or not,
// is copying B×V float32 log-probs to the host (4.9 MB at B = 8, V =
// 151,936). The graphs and the KV cache they keep are in kvcache.go.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// ConstraintKind says what a Constraint does to the next token of a row.
type ConstraintKind int

const (
	Free        ConstraintKind = iota // sample from the whole vocabulary
	ForceToken                        // emit Tokens[0]
	AllowTokens                       // sample only among Tokens
	BanTokens                         // sample among all ids except Tokens
)

// Constraint restricts the next token of one row. The zero value is Free.
type Constraint struct {
	Kind   ConstraintKind
	Tokens []int
}

// Force makes the next token id.
func Force(id int) Constraint { return Constraint{Kind: ForceToken, Tokens: []int{id}} }

// Allow restricts the next token to ids.
func Allow(ids ...int) Constraint { return Constraint{Kind: AllowTokens, Tokens: ids} }

// Ban excludes ids from the next token.
func Ban(ids ...int) Constraint { return Constraint{Kind: BanTokens, Tokens: ids} }

// GenerateOptions control Generate.
type GenerateOptions struct {
	MaxNewTokens int     // tokens to generate per row at most (> 0)
	Temperature  float64 // 0 = greedy (argmax, first id on ties); > 0 samples from softmax(logits / Temperature)
	TopK         int     // sample among the TopK most likely ids (0 = off)
	TopP         float64 // sample among the most likely ids whose mass reaches TopP (0 or 1 = off); applied after TopK
	Seed         uint64  // row i samples from its own PCG stream (Seed, i): same seed, same samples
	StopTokens   []int   // a row stops after emitting any of these ids (nil = never stop early)
	MaxBatch     int     // rows run together at most (0 = all); the results do not depend on it
	// NoPrefixReuse turns off the shared-prefix cache and kept prefixes:
	// every row's whole prompt is prefilled (the results do not depend on
	// it, up to float32 rounding).
	NoPrefixReuse bool
	// KeepPrefix, when > 0, says that the prompts' first KeepPrefix tokens
	// are a static prefix (a guard role's system prompt and tool schema,
	// the same at every call): its keys and values are prefilled once and
	// kept by the model (prefixcache.go: a few prefixes, dropped when the
	// weights change), and later batches that start with the same tokens,
	// of one row or many, prefill only what follows. A batch whose prompts
	// do not all start with the same KeepPrefix tokens followed by at least
	// one more keeps nothing. A batch that reuses a kept prefix gives the
	// same tokens and log-probs as the batch that prefilled it; beside a
	// whole-prompt prefill they differ by float32 rounding only.
	KeepPrefix int
	// Constrain, when set, is called before each step for each live row with
	// the tokens it generated so far; its Constraint applies to that step.
	Constrain func(row int, generated []int) Constraint
	// Watch lists token ids whose log-probs every row reports at every step
	// (Generation.Watch), from the same unconstrained log_softmax(logits / T)
	// as LogProbs, e.g. a decision's alternatives, to score it.
	Watch []int

	observe func(row, step int, logp []float32) // tests and Score: the log-probs a step sampled from
}

// Generation is the output of one prompt.
type Generation struct {
	Tokens   []int     // generated ids, the stop token included
	LogProbs []float32 // per token, log_softmax(logits / T)[token] without constraints (T = 1 when greedy): what TokenLogProbs computes
	Stopped  bool      // ended on a stop token (else on MaxNewTokens)
	// Watch, with GenerateOptions.Watch: per generated token, the log-probs
	// of the watched ids (in GenerateOptions.Watch's order) at the step that
	// picked it.
	Watch [][]float32
	// Prefill and Decode are the wall times of the batch the row ran in
	// (shared by its rows): its prompts' prefill (until the first tokens'
	// log-probs are back), then the token-by-token decoding.
	Prefill, Decode time.Duration
}

// Bucket bounds for shapes.
const (
	minPromptBucket   = 16
	minCapacityBucket = 32
)

// unboundedGraphs lifts GoMLX's cap of 32 compiled graphs per executable
// (context.Exec.SetMaxCache): the generation and scoring executables
// compile one graph per shape bucket (GenerationShape, PrefillTokens), a
// long eval or a server meets more than 32 of them, and past the cap every
// new shape fails. The buckets bound how many there can be.
const unboundedGraphs = -1

// minSharedPrefix is the shortest common prefix that Generate prefills once
// for the whole batch (shorter ones are not worth an extra graph run).
const minSharedPrefix = 32

// bucket returns the smallest power of two ≥ max(n, lo).
func bucket(n, lo int) int {
	b := lo
	for b < n {
		b *= 2
	}
	return b
}

// Generate continues each prompt (token ids) with up to MaxNewTokens tokens.
func (m *Model) Generate(prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	if opts.MaxNewTokens <= 0 {
		return nil, fmt.Errorf("generate: MaxNewTokens must be positive, got %d", opts.MaxNewTokens)
	}
	if opts.Temperature < 0 || math.IsNaN(opts.Temperature) {
		return nil, fmt.Errorf("generate: Temperature must be >= 0, got %g", opts.Temperature)
	}
	if opts.TopK < 0 || opts.TopP < 0 || opts.TopP > 1 {
		return nil, fmt.Errorf("generate: TopK must be >= 0 and TopP in [0, 1], got %d and %g", opts.TopK, opts.TopP)
	}
	V := m.cfg.VocabSize
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("generate: prompt %d is empty", i)
		}
		for j, id := range p {
			if id < 0 || id >= V {
				return nil, fmt.Errorf("generate: prompt %d token %d: id %d outside the vocabulary [0, %d)", i, j, id, V)
			}
		}
		if n := len(p) + opts.MaxNewTokens; n > m.cfg.MaxPositionEmbeddings {
			return nil, fmt.Errorf("generate: prompt %d: %d tokens + %d new exceed max_position_embeddings %d",
				i, len(p), opts.MaxNewTokens, m.cfg.MaxPositionEmbeddings)
		}
	}
	for _, id := range opts.StopTokens {
		if id < 0 || id >= V {
			return nil, fmt.Errorf("generate: stop token %d outside the vocabulary [0, %d)", id, V)
		}
	}
	for _, id := range opts.Watch {
		if id < 0 || id >= V {
			return nil, fmt.Errorf("generate: watched token %d outside the vocabulary [0, %d)", id, V)
		}
	}
	out := make([]Generation, len(prompts))
	chunk := len(prompts)
	if opts.MaxBatch > 0 {
		chunk = opts.MaxBatch
	}
	for start := 0; start < len(prompts); start += chunk {
		end := min(start+chunk, len(prompts))
		if err := m.generateBatch(prompts[start:end], start, opts, out[start:end]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// generateBatch runs rows first..first+len(prompts)-1 together.
func (m *Model) generateBatch(prompts [][]int, first int, opts GenerateOptions, out []Generation) error {
	n := len(prompts)
	maxLen := 0
	for _, p := range prompts {
		maxLen = max(maxLen, len(p))
	}
	B, S := GenerationShape(n, maxLen, opts.MaxNewTokens)
	temp := float32(opts.Temperature)
	if opts.Temperature == 0 {
		temp = 1 // greedy: log-probs reported under temperature 1
	}

	var res []*tensors.Tensor
	var err error
	started := time.Now()
	switch P := sharedPrefixLen(prompts); {
	case opts.NoPrefixReuse:
		res, err = m.prefillRows(prompts, B, S, temp)
	case opts.KeepPrefix > 0 && opts.KeepPrefix <= P:
		res, err = m.prefillKept(prompts, opts.KeepPrefix, P, B, S, temp)
	case P >= minSharedPrefix && n > 1:
		res, err = m.prefillShared(prompts, P, B, S, temp)
	default:
		res, err = m.prefillRows(prompts, B, S, temp)
	}
	if err != nil {
		return err
	}
	prefilled := time.Now()
	defer func() {
		for i := range out {
			out[i].Prefill, out[i].Decode = prefilled.Sub(started), time.Since(prefilled)
		}
	}()
	z, lse, cache := res[0], res[1], res[2:]
	defer func() {
		for _, t := range cache {
			t.FinalizeAll()
		}
	}()
	decode, err := m.extendExec()
	if err != nil {
		return err
	}
	rows := newBatchRows(m.cfg.VocabSize, opts, first, out)
	in := newDecodeInputs(B)
	for step := 0; step < opts.MaxNewTokens; step++ {
		if err := rows.pick(step, z, lse); err != nil {
			return err
		}
		if step == opts.MaxNewTokens-1 || !slices.Contains(rows.live, true) {
			break
		}
		args := append(in.feed(prompts, rows, step), temp)
		for _, t := range cache {
			args = append(args, donate(t, m))
		}
		res, err := execRecover(decode, args...)
		if err != nil {
			return fmt.Errorf("generate: decode step %d: %w", step, err)
		}
		z, lse, cache = res[0], res[1], res[2:]
	}
	return nil
}

// batchRows is what generateBatch keeps about its rows from step to step.
type batchRows struct {
	opts     GenerateOptions
	first    int          // the batch's first row among Generate's prompts
	out      []Generation // the rows' generations so far
	samplers []*sampler
	live     []bool // not stopped yet
	stop     map[int]bool
	lp       []float32 // one row's log-probs
}

func newBatchRows(V int, opts GenerateOptions, first int, out []Generation) *batchRows {
	r := &batchRows{opts: opts, first: first, out: out, samplers: make([]*sampler, len(out)),
		live: make([]bool, len(out)), stop: map[int]bool{}, lp: make([]float32, V)}
	for i := range out {
		r.samplers[i] = newSampler(V, opts, first+i)
		r.out[i] = Generation{}
		r.live[i] = true
	}
	for _, id := range opts.StopTokens {
		r.stop[id] = true
	}
	return r
}

// pick picks the next token of every live row from a step's logits / temperature z [B, V]
// and their log-sum-exps lse [B], log_softmax(z)[v] = z[v] - lse (float32, as in
// TokenLogProbs), and finalizes both.
func (r *batchRows) pick(step int, z, lse *tensors.Tensor) error {
	defer z.FinalizeAll()
	lses, err := tensors.CopyFlatData[float32](lse)
	lse.FinalizeAll()
	if err != nil {
		return fmt.Errorf("generate: reading log-probs: %w", err)
	}
	V := len(r.lp)
	var pickErr error
	err = tensors.ConstFlatData(z, func(flat []float32) {
		for i := 0; i < len(r.out) && pickErr == nil; i++ {
			if !r.live[i] {
				continue
			}
			for v, x := range flat[i*V : (i+1)*V] {
				r.lp[v] = x - lses[i]
			}
			pickErr = r.pickRow(i, step)
		}
	})
	if err != nil {
		return fmt.Errorf("generate: reading log-probs: %w", err)
	}
	return pickErr
}

// pickRow picks row i's next token from its log-probs r.lp.
func (r *batchRows) pickRow(i, step int) error {
	row, lp := r.first+i, r.lp
	if r.opts.observe != nil {
		r.opts.observe(row, step, lp)
	}
	var c Constraint
	if r.opts.Constrain != nil {
		c = r.opts.Constrain(row, r.out[i].Tokens)
	}
	id, err := r.samplers[i].pick(lp, c)
	if err != nil {
		return fmt.Errorf("generate: row %d step %d: %w", row, step, err)
	}
	g := &r.out[i]
	g.Tokens = append(g.Tokens, id)
	g.LogProbs = append(g.LogProbs, lp[id])
	if len(r.opts.Watch) > 0 {
		w := make([]float32, len(r.opts.Watch))
		for k, wid := range r.opts.Watch {
			w[k] = lp[wid]
		}
		g.Watch = append(g.Watch, w)
	}
	if r.stop[id] {
		g.Stopped = true
		r.live[i] = false
	}
	return nil
}

// decodeInputs are the extend graph's inputs of a decoding step, one token per row: tokens,
// positions, validity [B, 1] and each row's last token's index (0) [B].
type decodeInputs struct {
	next, pos [][]int32
	valid     [][]bool
	last      []int32
}

func newDecodeInputs(B int) *decodeInputs {
	in := &decodeInputs{next: make([][]int32, B), pos: make([][]int32, B), valid: make([][]bool, B), last: make([]int32, B)}
	for b := range in.next {
		in.next[b], in.pos[b], in.valid[b] = make([]int32, 1), make([]int32, 1), []bool{true}
	}
	return in
}

// feed sets the tokens picked at step: row b's goes to slot len_b + step. Finished and
// filler rows write into their slot 0: their cache no longer matters. It returns the
// extend graph's first four arguments.
func (in *decodeInputs) feed(prompts [][]int, rows *batchRows, step int) []any {
	for b := range in.next {
		in.next[b][0], in.pos[b][0] = 0, 0
		if b < len(prompts) && rows.live[b] {
			in.next[b][0] = int32(rows.out[b].Tokens[step])
			in.pos[b][0] = int32(len(prompts[b]) + step)
		}
	}
	return []any{in.next, in.pos, in.valid, in.last}
}
