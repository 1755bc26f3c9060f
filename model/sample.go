package model

// Sampling the next token of a row on the host, from the log-probs
// log_softmax(logits / T) that every generation step brings back.
//
// pick composes the strategies, each written once:
//
//	constraint → the candidate ids (all but the banned ones, or the allowed ones; a forced id is returned as is)
//	greedy     → the most likely candidate (the first id on ties)
//	top-k      → the k most likely candidates
//	top-p      → the shortest run of the most likely candidates whose mass reaches p of theirs
//	draw       → an inverse-CDF draw from what is left, renormalized

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/mageguard/mageguard/internal/simplegofast"
)

// sampler picks the tokens of one row.
type sampler struct {
	opts   GenerateOptions
	rng    *rand.Rand
	banned []bool    // scratch for BanTokens, all false between calls
	probs  []float32 // scratch for drawVocabulary
}

func newSampler(vocab int, opts GenerateOptions, row int) *sampler {
	return &sampler{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, uint64(row))), banned: make([]bool, vocab)}
}

// cand is a candidate id and its log-prob.
type cand struct {
	id int
	lp float32
}

// candidates are the ids a constraint leaves: every id of the vocabulary
// not banned (ids == nil), or the listed ids, in increasing order.
type candidates struct {
	lp     []float32
	ids    []int
	banned []bool
}

// each calls fn with every candidate in increasing id order.
func (c candidates) each(fn func(id int)) {
	if c.ids != nil {
		for _, id := range c.ids {
			fn(id)
		}
		return
	}
	for id := range c.lp {
		if !c.banned[id] {
			fn(id)
		}
	}
}

// pick chooses the next id from log-probs lp under constraint c.
func (s *sampler) pick(lp []float32, c Constraint) (int, error) {
	if c.Kind == ForceToken {
		if len(c.Tokens) != 1 {
			return 0, fmt.Errorf("Force constraint wants one token, got %d", len(c.Tokens))
		}
		return c.Tokens[0], checkID(c.Tokens[0], len(lp))
	}
	cs, release, err := s.candidates(lp, c)
	if err != nil {
		return 0, err
	}
	defer release()
	if s.opts.Temperature == 0 {
		return greedy(cs)
	}
	topP := s.opts.TopP
	if topP >= 1 {
		topP = 0 // off
	}
	switch {
	case s.opts.TopK > 0 && topP > 0:
		return s.draw(topPOf(rankedList(topK(cs, s.opts.TopK)), topP))
	case s.opts.TopK > 0:
		return s.draw(topK(cs, s.opts.TopK))
	case topP > 0:
		return s.draw(topPOf(ranked(cs), topP))
	case cs.ids != nil:
		return s.draw(inIDOrder(cs))
	}
	return s.drawVocabulary(cs)
}

func checkID(id, V int) error {
	if id < 0 || id >= V {
		return fmt.Errorf("constraint token %d outside the vocabulary [0, %d)", id, V)
	}
	return nil
}

// candidates returns the ids constraint c leaves (Free, AllowTokens or
// BanTokens) and a function that clears the ban scratch when done.
func (s *sampler) candidates(lp []float32, c Constraint) (candidates, func(), error) {
	cs := candidates{lp: lp, banned: s.banned}
	none := func() {}
	switch c.Kind {
	case Free:
		return cs, none, nil
	case AllowTokens:
		ids := slices.Clone(c.Tokens)
		sort.Ints(ids)
		ids = slices.Compact(ids)
		if len(ids) == 0 {
			return cs, none, errors.New("Allow constraint with no tokens")
		}
		for _, id := range ids {
			if err := checkID(id, len(lp)); err != nil {
				return cs, none, err
			}
		}
		cs.ids = ids
		return cs, none, nil
	case BanTokens:
		for _, id := range c.Tokens {
			if err := checkID(id, len(lp)); err != nil {
				return cs, none, err
			}
		}
		for _, id := range c.Tokens {
			s.banned[id] = true
		}
		release := func() {
			for _, id := range c.Tokens {
				s.banned[id] = false
			}
		}
		if len(c.Tokens) >= len(lp) && !slices.Contains(s.banned, false) {
			release()
			return cs, none, errors.New("Ban constraint bans the whole vocabulary")
		}
		return cs, release, nil
	}
	return cs, none, fmt.Errorf("unknown constraint kind %d", c.Kind)
}

// greedy returns the most likely candidate, the first id on ties.
func greedy(cs candidates) (int, error) {
	best, bestLP := -1, float32(math.Inf(-1))
	cs.each(func(id int) {
		if best < 0 || cs.lp[id] > bestLP {
			best, bestLP = id, cs.lp[id]
		}
	})
	if best < 0 {
		return 0, errors.New("no token left to choose from")
	}
	return best, nil
}

// topK returns the k most likely candidates, most likely first (ties: the
// smaller id first).
func topK(cs candidates, k int) []cand {
	h := &minHeap{}
	cs.each(func(id int) {
		c := cand{id, cs.lp[id]}
		if h.Len() < k {
			heap.Push(h, c)
		} else if less((*h)[0], c) {
			(*h)[0] = c
			heap.Fix(h, 0)
		}
	})
	kept := make([]cand, h.Len())
	for i := len(kept) - 1; i >= 0; i-- {
		kept[i] = heap.Pop(h).(cand)
	}
	return kept
}

// rankedCands yields candidates most likely first, as needed.
type rankedCands interface {
	next() (cand, bool)
	total() float64 // Σ exp(lp) over all of them
}

// sliceRank ranks a list already most likely first.
type sliceRank []cand

func (r *sliceRank) next() (cand, bool) {
	if len(*r) == 0 {
		return cand{}, false
	}
	c := (*r)[0]
	*r = (*r)[1:]
	return c, true
}

func (r *sliceRank) total() float64 { return mass(*r) }

// rankedList ranks a list already most likely first (top-k's).
func rankedList(list []cand) rankedCands {
	r := sliceRank(list)
	return &r
}

// heapRank ranks candidates with a max-heap, popping only what is asked
// for (top-p over the whole vocabulary keeps a few of its 151,936 ids).
type heapRank struct {
	h   maxHeap
	sum float64
}

func (r *heapRank) next() (cand, bool) {
	if r.h.Len() == 0 {
		return cand{}, false
	}
	return heap.Pop(&r.h).(cand), true
}

func (r *heapRank) total() float64 { return r.sum }

// ranked ranks every candidate.
func ranked(cs candidates) rankedCands {
	var list []cand
	cs.each(func(id int) { list = append(list, cand{id, cs.lp[id]}) })
	r := &heapRank{h: maxHeap(list), sum: mass(list)}
	heap.Init(&r.h)
	return r
}

// topPOf returns the shortest run of the most likely candidates whose
// probability mass reaches p of the mass of all of them (0 < p < 1).
func topPOf(r rankedCands, p float64) []cand {
	target := p * r.total()
	var kept []cand
	var acc float64
	for len(kept) == 0 || acc < target {
		c, ok := r.next()
		if !ok {
			break
		}
		kept = append(kept, c)
		acc += math.Exp(float64(c.lp))
	}
	return kept
}

// inIDOrder lists the candidates in increasing id order.
func inIDOrder(cs candidates) []cand {
	var list []cand
	cs.each(func(id int) { list = append(list, cand{id, cs.lp[id]}) })
	return list
}

// mass is Σ exp(lp) over a list.
func mass(list []cand) float64 {
	var total float64
	for _, c := range list {
		total += math.Exp(float64(c.lp))
	}
	return total
}

// draw picks from a list by inverse CDF over its probabilities
// renormalized to the list, in the list's order.
func (s *sampler) draw(list []cand) (int, error) {
	if len(list) == 0 {
		return 0, errors.New("no token left to choose from")
	}
	total := mass(list)
	if !(total > 0) {
		return 0, errors.New("candidates have zero probability")
	}
	u := s.rng.Float64() * total
	var acc float64
	for _, c := range list {
		acc += math.Exp(float64(c.lp))
		if acc > u {
			return c.id, nil
		}
	}
	return list[len(list)-1].id, nil // rounding: the last candidate
}

// drawVocabulary is draw over every candidate of the whole vocabulary in id
// order, with the exponentials computed in one vectorized pass
// (simplegofast.ExpFloat32) instead of twice per id.
func (s *sampler) drawVocabulary(cs candidates) (int, error) {
	lp := cs.lp
	if len(s.probs) != len(lp) {
		s.probs = make([]float32, len(lp))
	}
	p := s.probs
	simplegofast.ExpFloat32(p, lp)
	var total float64
	last := -1 // the last candidate, taken when rounding leaves the draw past the end
	for id, x := range p {
		if cs.banned[id] {
			p[id] = 0
			continue
		}
		total += float64(x)
		last = id
	}
	if !(total > 0) {
		return 0, errors.New("candidates have zero probability")
	}
	u := s.rng.Float64() * total
	var acc float64
	for id, x := range p {
		acc += float64(x)
		if acc > u {
			return id, nil
		}
	}
	return last, nil
}

// less orders candidates by log-prob, then prefers the smaller id.
func less(a, b cand) bool {
	if a.lp != b.lp {
		return a.lp < b.lp
	}
	return a.id > b.id
}

// minHeap keeps the least likely kept candidate on top (top-k).
type minHeap []cand

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return less(h[i], h[j]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// maxHeap pops the most likely candidate first (top-p).
type maxHeap []cand

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return less(h[j], h[i]) }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
