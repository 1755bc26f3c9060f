package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// byteRune is GPT-2's bytes_to_unicode table: the printable character that
// stands for each byte in tokenizer.json's byte-level tokens. Printable
// Latin-1 bytes stand for themselves; the others (control characters,
// space, …) are mapped in order to U+0100 and up, so " " is "Ġ" (U+0120).
var byteRune [256]rune

// runeByte is the inverse of byteRune: runeByte[r] is the byte r stands
// for plus one, or 0 when r stands for no byte.
var runeByte [512]int16

func init() {
	printable := func(b int) bool {
		return b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
	}
	next := rune(256)
	for b := range 256 {
		if printable(b) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = next
			next++
		}
		runeByte[byteRune[b]] = int16(b) + 1
	}
}

// byteLevelDecode turns a token written in byte-level form back into its
// bytes. A character outside the byte-level alphabet stands for its own
// UTF-8 bytes, as in Hugging Face's ByteLevel decoder.
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r < rune(len(runeByte)) && runeByte[r] > 0 {
			out = append(out, byte(runeByte[r]-1))
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// bpe appends the BPE ids of one pre-token to ids, using the cache.
func (t *Tokenizer) bpe(piece string, ids []int) []int {
	if len(piece) == 1 {
		return append(ids, int(t.byteID[piece[0]]))
	}
	cacheable := len(piece) <= maxCachedPiece
	if cacheable {
		t.mu.RLock()
		hit, ok := t.cache[piece]
		t.mu.RUnlock()
		if ok {
			return append(ids, hit...)
		}
	}
	start := len(ids)
	ids = t.merge(piece, ids)
	if cacheable {
		t.mu.Lock()
		if len(t.cache) < maxCache {
			// Clone the key: piece points into the caller's whole text.
			t.cache[strings.Clone(piece)] = slices.Clone(ids[start:])
		}
		t.mu.Unlock()
	}
	return ids
}

// symbol is one token of a pre-token being merged: a doubly linked list
// over the initial byte positions.
type symbol struct {
	id         int32
	prev, next int32 // neighbor positions, -1 at the ends
	gone       bool  // merged into its left neighbor
}

// candidate is a possible merge of the symbol at pos with its right
// neighbor, ordered by rank, then by position.
type candidate struct {
	rank, pos, id int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// merge appends the BPE ids of piece to ids. It follows Hugging Face's
// Word::merge_all: start from one token per byte, and repeatedly apply the
// lowest-ranked merge present (leftmost on ties), using a min-heap of
// candidate merges whose stale entries are skipped when popped.
// O(n log n) in the length of piece.
func (t *Tokenizer) merge(piece string, ids []int) []int {
	n := len(piece)
	// Most pre-tokens are short: keep their work arrays on the stack.
	var symBuf [32]symbol
	var heapBuf [32]candidate
	syms := symBuf[:0]
	if n > len(symBuf) {
		syms = make([]symbol, n)
	}
	syms = syms[:n]
	for i := range n {
		syms[i] = symbol{id: t.byteID[piece[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[n-1].next = -1

	h := minHeap(heapBuf[:0])
	for i := 0; i+1 < n; i++ {
		if m, ok := t.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
			h = h.push(candidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	for len(h) > 0 {
		var c candidate
		c, h = h.pop()
		s := &syms[c.pos]
		if s.gone || s.next < 0 {
			continue
		}
		right := syms[s.next]
		// Skip a stale candidate: the pair at pos has changed since.
		if m, ok := t.merges[[2]int32{s.id, right.id}]; !ok || m.id != c.id {
			continue
		}
		s.id = c.id
		syms[s.next].gone = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := t.merges[[2]int32{syms[s.prev].id, s.id}]; ok {
				h = h.push(candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := t.merges[[2]int32{s.id, syms[s.next].id}]; ok {
				h = h.push(candidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, int(syms[i].id))
	}
	return ids
}

// minHeap is a binary min-heap of candidates.
type minHeap []candidate

func (h minHeap) push(c candidate) minHeap {
	a := append(h, c)
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
	return a
}

func (h minHeap) pop() (candidate, minHeap) {
	a := h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].less(a[m]) {
			m = l
		}
		if r < len(a) && a[r].less(a[m]) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	return top, a
}
