// Package localgen runs the guard's calls on a Qwen3 model in this process
// (rollout.generator: local): batched sampling with a KV cache, stopping
// at the stop tokens, and structured decoding through the model's
// per-step constraint hook.
package localgen

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
)

// Generator generates guard completions with a Qwen3 model.
type Generator struct {
	Model *model.Model

	// NoKeptPrefix prefills each request's static prefix (Request.Prefix)
	// at every call instead of keeping its keys and values in the model
	// across calls (model.GenerateOptions.KeepPrefix): for benchmarks; the
	// completions do not depend on it beyond float32 rounding.
	NoKeptPrefix bool

	stepByStep bool // tests: decode the leading forced tokens one step each, as the grammar alone would

	bans map[*grammar.Grammar][]int // a grammar's banned ids plus the model's ids beyond the tokenizer's vocabulary
}

// banned returns the ids a free string of g may not use: the grammar's
// (its constraint's Banned), and the model's padding ids that no tokenizer
// token has (Qwen3's embedding has 151,936 rows for 151,669 tokens).
func (mg *Generator) banned(g *grammar.Grammar, grammarBans []int) []int {
	if ids, ok := mg.bans[g]; ok {
		return ids
	}
	ids := append([]int(nil), grammarBans...)
	for id := g.Vocab().VocabSize(); id < mg.Model.Config().VocabSize; id++ {
		ids = append(ids, id)
	}
	if mg.bans == nil {
		mg.bans = map[*grammar.Grammar][]int{}
	}
	mg.bans[g] = ids
	return ids
}

// Generate implements generate.Generator. Requests are grouped by MaxNew
// and Stops; each group is one call of model.Generate. The tokens a
// grammar forces before its first choice (a call's opening text, the same
// for every row of a role) are prefilled with the prompt rather than
// decoded one step each: they carry no choice, so their log-probs are
// reported as 0 (log 1) and their watched log-probs as −Inf (not
// computed); the tokens after them are what decoding them one by one
// would give.
//
// The static prefix the requests name (Request.Prefix) is prefilled once
// and kept by the model for later calls (model.GenerateOptions.KeepPrefix)
// when every request of a group names the same one.
func (mg *Generator) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	out := make([]generate.Completion, len(reqs))
	var prefill time.Duration
	for gi, idx := range groups(reqs) {
		gr := mg.newGroup(reqs, idx)
		opts := model.GenerateOptions{
			MaxNewTokens: gr.maxNew - gr.lead,
			Temperature:  s.Temperature,
			TopK:         s.TopK,
			TopP:         s.TopP,
			Seed:         seed.Mix(s.Seed, uint64(gi)),
			StopTokens:   reqs[idx[0]].Stops,
			Watch:        gr.watch,
		}
		if s.Greedy {
			opts.Temperature = 0
		}
		if !mg.NoKeptPrefix {
			opts.KeepPrefix = gr.prefix
		}
		var advErr error
		opts.Constrain = mg.constrain(gr, &advErr)
		gens, err := mg.Model.Generate(gr.prompts, opts)
		if err != nil {
			return nil, err
		}
		if advErr != nil {
			return nil, advErr
		}
		for k, i := range idx {
			if out[i], err = gr.completion(k, gens[k]); err != nil {
				return nil, err
			}
		}
		if len(gens) > 0 {
			prefill += gens[0].Prefill
		}
	}
	for i := range out {
		out[i].Prefill = prefill
	}
	return out, nil
}

// groups returns the indices of the requests that share MaxNew and Stops,
// group by group in the order of their first request.
func groups(reqs []generate.Request) [][]int {
	type key struct {
		maxNew int
		stops  string
	}
	at := map[key]int{}
	var out [][]int
	for i, r := range reqs {
		k := key{r.MaxNew, fmt.Sprint(r.Stops)}
		g, ok := at[k]
		if !ok {
			g = len(out)
			at[k] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// group is one call of model.Generate: the rows of requests that share
// MaxNew and Stops.
type group struct {
	reqs     []generate.Request // the rows' requests
	maxNew   int
	prompts  [][]int            // per row: the prompt, then the prefilled forced tokens
	decoders []*grammar.Decoder // per row: its grammar's state (nil: free)
	forced   [][]bool           // per row: whether each decoded token was forced
	leading  [][]int            // per row: the tokens its grammar forces before its first choice
	lead     int                // how many of them every row has: prefilled, not decoded
	watch    []int              // the union of the rows' watched ids
	prefix   int                // the static prefix every row names (Request.Prefix), 0 when they differ
	slot     map[int]int        // watched id → its index in watch
}

// newGroup prepares the rows of the requests at idx: the leading forced
// tokens every row has are appended to the prompts (at most maxNew−1: one
// token at least is decoded; none with stepByStep), each grammar's decoder
// is advanced past them, and the watched ids are gathered.
func (mg *Generator) newGroup(all []generate.Request, idx []int) *group {
	maxNew := all[idx[0]].MaxNew
	gr := &group{maxNew: maxNew, prompts: make([][]int, len(idx)), decoders: make([]*grammar.Decoder, len(idx)),
		forced: make([][]bool, len(idx)), leading: make([][]int, len(idx)), lead: maxNew - 1, slot: map[int]int{}}
	if mg.stepByStep {
		gr.lead = 0
	}
	gr.prefix = all[idx[0]].Prefix
	for k, i := range idx {
		gr.reqs = append(gr.reqs, all[i])
		if all[i].Prefix != gr.prefix {
			gr.prefix = 0
		}
		if all[i].Grammar != nil {
			gr.leading[k] = all[i].Grammar.NewDecoder(maxNew).Leading()
		}
		gr.lead = min(gr.lead, len(gr.leading[k]))
	}
	for k, r := range gr.reqs {
		gr.prompts[k] = r.Prompt
		if r.Grammar != nil {
			gr.decoders[k] = r.Grammar.NewDecoder(maxNew)
			for _, id := range gr.leading[k][:gr.lead] {
				_ = gr.decoders[k].Advance(id) // the tokens Leading() accepted
			}
			gr.prompts[k] = append(slices.Clip(gr.prompts[k]), gr.leading[k][:gr.lead]...)
		}
		for _, id := range r.Watch {
			if _, ok := gr.slot[id]; !ok {
				gr.slot[id] = len(gr.watch)
				gr.watch = append(gr.watch, id)
			}
		}
	}
	return gr
}

// constrain is the model's per-step hook for gr's rows: each row's grammar
// says what its next token may be. The first error of a grammar goes to
// *advErr.
func (mg *Generator) constrain(gr *group, advErr *error) func(row int, generated []int) model.Constraint {
	return func(row int, generated []int) model.Constraint {
		d := gr.decoders[row]
		if d == nil {
			return model.Constraint{}
		}
		// Called once per step: first consume the token sampled under
		// the previous step's constraint.
		if n := len(generated); n > 0 {
			if err := d.Advance(generated[n-1]); err != nil && *advErr == nil {
				*advErr = err
			}
		}
		c := d.Next()
		gr.forced[row] = append(gr.forced[row], c.Force >= 0)
		switch {
		case c.Force >= 0:
			return model.Force(c.Force)
		case c.Allowed != nil:
			return model.Allow(c.Allowed...)
		case c.Banned != nil:
			return model.Ban(mg.banned(gr.reqs[row].Grammar, c.Banned)...)
		}
		return model.Constraint{}
	}
}

// completion returns row k's completion from its generation g: the
// prefilled tokens (forced, log-prob 0, watched −Inf), then g's.
func (gr *group) completion(k int, g model.Generation) (generate.Completion, error) {
	f := gr.forced[k]
	if len(f) > len(g.Tokens) {
		f = f[:len(g.Tokens)]
	}
	if f == nil {
		f = make([]bool, len(g.Tokens))
	}
	if len(f) != len(g.Tokens) {
		return generate.Completion{}, fmt.Errorf("structured decoding: %d constraints for %d tokens", len(f), len(g.Tokens))
	}
	pre := gr.leading[k][:min(gr.lead, len(gr.leading[k]))]
	c := generate.Completion{
		Tokens:   append(slices.Clone(pre), g.Tokens...),
		LogProbs: append(make([]float32, len(pre)), g.LogProbs...),
		Forced:   append(slices.Repeat([]bool{true}, len(pre)), f...),
	}
	if w := gr.reqs[k].Watch; len(w) > 0 {
		c.Watch = make([][]float32, len(pre), len(pre)+len(g.Watch))
		for s := range pre {
			c.Watch[s] = slices.Repeat([]float32{float32(math.Inf(-1))}, len(w))
		}
		for _, all := range g.Watch {
			row := make([]float32, len(w))
			for j, id := range w {
				row[j] = all[gr.slot[id]]
			}
			c.Watch = append(c.Watch, row)
		}
	}
	return c, nil
}
