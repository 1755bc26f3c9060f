package rollout

import (
	"fmt"
	"math"
	"slices"

	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
)

// ModelGenerator generates guard completions with a Qwen3 model: batched
// sampling with a KV cache, stopping at the stop tokens, and structured
// decoding through the model's per-step constraint hook.
type ModelGenerator struct {
	Model *model.Model

	stepByStep bool // tests: decode the leading forced tokens one step each, as the grammar alone would

	bans map[*grammar.Grammar][]int // a grammar's banned ids plus the model's ids beyond the tokenizer's vocabulary
}

// banned returns the ids a free string of g may not use: the grammar's
// (its constraint's Banned), and the model's padding ids that no tokenizer
// token has (Qwen3's embedding has 151,936 rows for 151,669 tokens).
func (mg *ModelGenerator) banned(g *grammar.Grammar, grammarBans []int) []int {
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

// Generate implements Generator. Requests are grouped by MaxNew and Stops;
// each group is one call of model.Generate. The tokens a grammar forces
// before its first choice (a call's opening text, the same for every row
// of a role) are prefilled with the prompt rather than decoded one step
// each: they carry no choice, so their log-probs are reported as 0 (log 1)
// and their watched log-probs as −Inf (not computed); the tokens after them
// are what decoding them one by one would give.
func (mg *ModelGenerator) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	out := make([]generate.Completion, len(reqs))
	type key struct {
		maxNew int
		stops  string
	}
	groups := map[key][]int{}
	var order []key
	for i, r := range reqs {
		k := key{r.MaxNew, fmt.Sprint(r.Stops)}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for gi, gk := range order {
		idx, maxNew := groups[gk], gk.maxNew
		prompts := make([][]int, len(idx))
		decoders := make([]*grammar.Decoder, len(idx))
		forced := make([][]bool, len(idx))
		var watch []int       // the union of the group's watched ids
		slot := map[int]int{} // watched id → its index in watch
		// The leading forced tokens every row of the group has (p of them).
		lead := make([][]int, len(idx))
		p := maxNew - 1 // at least one token is decoded
		if mg.stepByStep {
			p = 0
		}
		for k, i := range idx {
			if reqs[i].Grammar != nil {
				lead[k] = reqs[i].Grammar.NewDecoder(maxNew).Leading()
			}
			p = min(p, len(lead[k]))
		}
		for k, i := range idx {
			prompts[k] = reqs[i].Prompt
			if reqs[i].Grammar != nil {
				decoders[k] = reqs[i].Grammar.NewDecoder(maxNew)
				for _, id := range lead[k][:p] {
					_ = decoders[k].Advance(id) // the tokens Leading() accepted
				}
				prompts[k] = append(slices.Clip(prompts[k]), lead[k][:p]...)
			}
			for _, id := range reqs[i].Watch {
				if _, ok := slot[id]; !ok {
					slot[id] = len(watch)
					watch = append(watch, id)
				}
			}
		}
		opts := model.GenerateOptions{
			MaxNewTokens: maxNew - p,
			Temperature:  s.Temperature,
			TopK:         s.TopK,
			TopP:         s.TopP,
			Seed:         seed.Mix(s.Seed, uint64(gi)),
			StopTokens:   reqs[idx[0]].Stops,
			Watch:        watch,
		}
		if s.Greedy {
			opts.Temperature = 0
		}
		var advErr error
		opts.Constrain = func(row int, generated []int) model.Constraint {
			d := decoders[row]
			if d == nil {
				return model.Constraint{}
			}
			// Called once per step: first consume the token sampled under
			// the previous step's constraint.
			if n := len(generated); n > 0 {
				if err := d.Advance(generated[n-1]); err != nil && advErr == nil {
					advErr = err
				}
			}
			c := d.Next()
			forced[row] = append(forced[row], c.Force >= 0)
			switch {
			case c.Force >= 0:
				return model.Force(c.Force)
			case c.Allowed != nil:
				return model.Allow(c.Allowed...)
			case c.Banned != nil:
				return model.Ban(mg.banned(reqs[idx[row]].Grammar, c.Banned)...)
			}
			return model.Constraint{}
		}
		gens, err := mg.Model.Generate(prompts, opts)
		if err != nil {
			return nil, err
		}
		if advErr != nil {
			return nil, advErr
		}
		for k, i := range idx {
			g := gens[k]
			f := forced[k]
			if len(f) > len(g.Tokens) {
				f = f[:len(g.Tokens)]
			}
			if f == nil {
				f = make([]bool, len(g.Tokens))
			}
			if len(f) != len(g.Tokens) {
				return nil, fmt.Errorf("structured decoding: %d constraints for %d tokens", len(f), len(g.Tokens))
			}
			pre := lead[k][:min(p, len(lead[k]))]
			c := generate.Completion{
				Tokens:   append(slices.Clone(pre), g.Tokens...),
				LogProbs: append(make([]float32, len(pre)), g.LogProbs...),
				Forced:   append(slices.Repeat([]bool{true}, len(pre)), f...),
			}
			if w := reqs[i].Watch; len(w) > 0 {
				c.Watch = make([][]float32, len(pre), len(pre)+len(g.Watch))
				for s := range pre {
					c.Watch[s] = slices.Repeat([]float32{float32(math.Inf(-1))}, len(w))
				}
				for _, all := range g.Watch {
					row := make([]float32, len(w))
					for j, id := range w {
						row[j] = all[slot[id]]
					}
					c.Watch = append(c.Watch, row)
				}
			}
			out[i] = c
		}
	}
	return out, nil
}
