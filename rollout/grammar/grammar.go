// Package grammar is structured decoding: the sampler can only produce a
// valid tool call.
//
// A call is a template of pieces: fixed text (forced token by token), a
// choice between the token sequences of an enum's values, and free JSON
// string text. Inside a free string the sampler may pick any ordinary token
// whose text cannot break the string (no '"', '\' or control character, no
// added token), or a "closer": a token whose text is '"' followed by a
// prefix of the fixed text that comes next; the rest of that fixed text is
// then forced. When the row's token budget runs short, the closing text is
// forced. This is what serving stacks' structured outputs do. Only choices
// (enum values, free text) are the model's: forced tokens carry no choice
// and do not count in the GRPO loss. Regex writes the same template as a
// regular expression, for a server's guided decoding.
package grammar

import (
	"fmt"
	"strings"
)

// Vocab is what structured decoding needs from a tokenizer.
type Vocab interface {
	Encode(text string) []int // trusted text: added tokens in it are matched
	Decode(ids []int, skipSpecial bool) string
	VocabSize() int
	IsAdded(id int) bool
}

// Constraint restricts the next token of one row. Force >= 0 forces that
// token; else, when Allowed is not nil, only those ids may be sampled; else
// the ids in Banned may not be sampled (nil Banned: free).
type Constraint struct {
	Force   int
	Allowed []int
	Banned  []int
}

type pieceKind int

const (
	fixedPiece  pieceKind = iota // text forced token by token
	choicePiece                  // one of several token sequences
	stringPiece                  // free JSON string text, closed by a closer
)

type piece struct {
	kind    pieceKind
	options [][]int // fixed: one sequence; choice: one per option
	closing string  // string: the text of the fixed piece that follows it
	// string: the most tokens that closing can take from here, one more
	// free token included: 1 + the fixed closing, or a closer + the rest.
	closeCost int
}

// Grammar is one tool call's structure compiled over a vocabulary. It is
// immutable and shared by all rows; each row decodes with its own Decoder.
type Grammar struct {
	vocab   Vocab
	pieces  []piece
	stop    int            // token that ends the completion (e.g. <|im_end|>)
	banned  []int          // ids never allowed inside a free string
	closers map[int]string // closer id → its text ('"' + a prefix of the closing)

	parts []part // the call template it was compiled from (Regex)
}

// NewGrammar compiles a call template. "{choice:a|b}" marks an enum value,
// "{string}" free string text (it must be followed by '"'), all else is fixed
// text; stop is the token that ends the completion after the call. E.g.
//
//	<tool_call>\n{"name": "assess_risk", "arguments": {"decision": "{choice:approve|reject}", "rationale": "{string}"}}\n</tool_call>
func NewGrammar(v Vocab, template string, stop int) (*Grammar, error) {
	parts, err := parseTemplate(template)
	if err != nil {
		return nil, err
	}
	g := &Grammar{parts: parts, vocab: v, stop: stop, closers: map[int]string{}}
	var closings []string
	for i, pt := range parts {
		switch pt.kind {
		case fixedPiece:
			g.addFixed(pt.text)
		case stringPiece:
			closing := parts[i+1].text // the fixed text that follows: it begins with '"'
			g.pieces = append(g.pieces, piece{kind: stringPiece, closing: closing})
			closings = append(closings, closing)
		case choicePiece:
			p := piece{kind: choicePiece}
			for _, opt := range pt.options {
				p.options = append(p.options, v.Encode(opt))
			}
			g.pieces = append(g.pieces, p)
		}
	}
	// One pass over the vocabulary: what may not appear inside a string, and
	// which tokens close one.
	for id := 0; id < v.VocabSize(); id++ {
		if v.IsAdded(id) {
			g.banned = append(g.banned, id)
			continue
		}
		text := v.Decode([]int{id}, false)
		if text != "" && !strings.ContainsAny(text, "\"\\") && !hasControl(text) {
			continue // safe inside a JSON string
		}
		isCloser := false
		for _, c := range closings {
			if text != "" && strings.HasPrefix(c, text) {
				isCloser = true
			}
		}
		if isCloser {
			g.closers[id] = text
		} else {
			g.banned = append(g.banned, id)
		}
	}
	for i := range g.pieces {
		p := &g.pieces[i]
		if p.kind != stringPiece {
			continue
		}
		p.closeCost = 1 + len(g.pieces[i+1].options[0])
		for _, text := range g.closers {
			if strings.HasPrefix(p.closing, text) {
				p.closeCost = max(p.closeCost, 1+len(v.Encode(p.closing[len(text):])))
			}
		}
	}
	return g, nil
}

// Vocab returns the vocabulary g was compiled over.
func (g *Grammar) Vocab() Vocab { return g.vocab }

// part is a piece of a call template: fixed text, free string text
// ("{string}") or an enum value ("{choice:a|b}").
type part struct {
	kind    pieceKind
	text    string   // fixed: the text
	options []string // choice: the values
}

// parseTemplate splits a call template (see NewGrammar) into its parts,
// in order; a {string} must be followed by fixed text that begins with
// '"'.
func parseTemplate(template string) ([]part, error) {
	var parts []part
	rest := template
	for rest != "" {
		i := strings.Index(rest, "{choice:")
		k := strings.Index(rest, "{string}")
		if i < 0 || (k >= 0 && k < i) {
			i = k
		}
		if i < 0 {
			parts = append(parts, part{kind: fixedPiece, text: rest})
			break
		}
		if i > 0 {
			parts = append(parts, part{kind: fixedPiece, text: rest[:i]})
		}
		rest = rest[i:]
		if strings.HasPrefix(rest, "{string}") {
			rest = rest[len("{string}"):]
			if !strings.HasPrefix(rest, `"`) {
				return nil, fmt.Errorf("grammar %q: {string} must be followed by '\"'", template)
			}
			parts = append(parts, part{kind: stringPiece})
			continue
		}
		end := strings.Index(rest, "}")
		if end < 0 {
			return nil, fmt.Errorf("grammar %q: a {choice: without its closing brace", template)
		}
		p := part{kind: choicePiece}
		for _, opt := range strings.Split(rest[len("{choice:"):end], "|") {
			if opt == "" {
				return nil, fmt.Errorf("grammar %q: empty choice", template)
			}
			p.options = append(p.options, opt)
		}
		parts = append(parts, p)
		rest = rest[end+1:]
	}
	return parts, nil
}

func (g *Grammar) addFixed(text string) {
	ids := g.vocab.Encode(text)
	if n := len(g.pieces); n > 0 && g.pieces[n-1].kind == fixedPiece {
		g.pieces[n-1].options[0] = append(g.pieces[n-1].options[0], ids...)
		return
	}
	g.pieces = append(g.pieces, piece{kind: fixedPiece, options: [][]int{ids}})
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// Decoder is the state of one row decoding under a grammar.
type Decoder struct {
	g      *Grammar
	budget int   // max new tokens of the row
	n      int   // tokens consumed so far
	piece  int   // index of the current piece
	pos    int   // tokens consumed inside the current piece
	cands  []int // choice: options still consistent with the tokens so far
	forced []int // pending forced tokens (the rest of a closing text)
}

// NewDecoder starts a row with a budget of max new tokens. The budget must
// leave room for the fixed parts of the call (see MinBudget).
func (g *Grammar) NewDecoder(budget int) *Decoder {
	return &Decoder{g: g, budget: budget}
}

// Leading returns the tokens the grammar forces before its first choice (the
// call's opening text), advancing d past them. The stop token is never one
// of them.
func (d *Decoder) Leading() []int {
	var ids []int
	for {
		c := d.Next()
		if c.Force < 0 || c.Force == d.g.stop || d.Advance(c.Force) != nil {
			return ids
		}
		ids = append(ids, c.Force)
	}
}

// MinBudget is the fewest new tokens a completion under g can have.
func (g *Grammar) MinBudget() int {
	d := &Decoder{g: g}
	return d.reserve(0)
}

// reserve is the number of tokens needed to finish from piece i (at its
// start) to the end: fixed text (which includes each string's closing
// text), the longest choice, and the stop token; free strings may be empty.
func (d *Decoder) reserve(from int) int {
	r := 1
	for _, p := range d.g.pieces[from:] {
		switch p.kind {
		case fixedPiece:
			r += len(p.options[0])
		case choicePiece:
			m := 0
			for _, o := range p.options {
				m = max(m, len(o))
			}
			r += m
		}
	}
	return r
}

// Done reports whether the call and its stop token have been produced.
func (d *Decoder) Done() bool { return d.piece > len(d.g.pieces) }

// Next returns the constraint on the next token.
func (d *Decoder) Next() Constraint {
	if len(d.forced) > 0 {
		return Constraint{Force: d.forced[0]}
	}
	if d.piece >= len(d.g.pieces) {
		return Constraint{Force: d.g.stop}
	}
	p := d.g.pieces[d.piece]
	switch p.kind {
	case fixedPiece:
		return Constraint{Force: p.options[0][d.pos]}
	case choicePiece:
		if d.pos == 0 {
			d.cands = d.cands[:0]
			for i := range p.options {
				d.cands = append(d.cands, i)
			}
		}
		var ids []int
		seen := map[int]bool{}
		for _, i := range d.cands {
			if id := p.options[i][d.pos]; !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(ids) == 1 {
			return Constraint{Force: ids[0]}
		}
		return Constraint{Force: -1, Allowed: ids}
	default: // free string
		// Sample freely only while any way of closing the string still
		// fits in the budget with the rest of the call; else close it now.
		if d.budget-d.n < p.closeCost+d.reserve(d.piece+2) {
			d.piece, d.pos = d.piece+1, 0 // the fixed closing text is forced next
			return d.Next()
		}
		return Constraint{Force: -1, Banned: d.g.banned}
	}
}

// Advance consumes the token that was produced under Next's constraint.
func (d *Decoder) Advance(tok int) error {
	d.n++
	if len(d.forced) > 0 {
		if tok != d.forced[0] {
			return fmt.Errorf("structured decoding: got token %d, forced %d", tok, d.forced[0])
		}
		d.forced = d.forced[1:]
		return nil
	}
	if d.piece >= len(d.g.pieces) {
		if tok != d.g.stop {
			return fmt.Errorf("structured decoding: got token %d, want stop %d", tok, d.g.stop)
		}
		d.piece++
		return nil
	}
	p := d.g.pieces[d.piece]
	switch p.kind {
	case fixedPiece:
		if tok != p.options[0][d.pos] {
			return fmt.Errorf("structured decoding: got token %d, forced %d", tok, p.options[0][d.pos])
		}
		d.pos++
		if d.pos == len(p.options[0]) {
			d.piece, d.pos = d.piece+1, 0
		}
	case choicePiece:
		kept := d.cands[:0]
		for _, i := range d.cands {
			if p.options[i][d.pos] == tok {
				kept = append(kept, i)
			}
		}
		if len(kept) == 0 {
			return fmt.Errorf("structured decoding: token %d is no option", tok)
		}
		d.cands = kept
		d.pos++
		for _, i := range d.cands {
			if len(p.options[i]) == d.pos { // an option is complete
				d.piece, d.pos = d.piece+1, 0
				break
			}
		}
	case stringPiece:
		if text, ok := d.g.closers[tok]; ok {
			// The closer covers '"' and a prefix of the closing text, the
			// next (fixed) piece: force the rest of it and skip that piece.
			d.forced = d.g.vocab.Encode(p.closing[len(text):])
			d.piece, d.pos = d.piece+2, 0
		}
	}
	return nil
}

// Forced replays tokens, a completion generated under g with a budget of
// max new tokens (by a server's guided decoding, say), and reports for each
// token whether g forces it there: the tokens that carry no choice, which
// training leaves out of the loss. An error says the tokens leave g's
// token-level path (a server may write the same text with other tokens).
func (g *Grammar) Forced(tokens []int, budget int) ([]bool, error) {
	d := g.NewDecoder(budget)
	out := make([]bool, len(tokens))
	for i, tok := range tokens {
		if d.Done() {
			return nil, fmt.Errorf("structured decoding: %d tokens after the call's end", len(tokens)-i)
		}
		out[i] = d.Next().Force >= 0
		if err := d.Advance(tok); err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
	}
	return out, nil
}
