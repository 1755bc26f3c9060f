// Package tokenizer is a pure-Go byte-level BPE tokenizer that reads Hugging
// Face tokenizer.json files and encodes exactly as Hugging Face's tokenizers
// library does for Qwen2/Qwen3: NFC normalization, the Split pre-tokenizer
// with Qwen's regex (written by hand in pretokenize.go, since Go's regexp has
// no look-ahead), the GPT-2 byte-to-unicode mapping, BPE merges by rank, and
// added tokens.
//
// # Trusted and untrusted text
//
// There are two ways to encode text, and the choice is a security decision:
//
//   - Encode is for TRUSTED text only: prompts and templates that we wrote.
//     Like Hugging Face by default, it turns every added token written in the
//     text ("<|im_start|>", "<|im_end|>", "<tool_call>", "<think>", …) into
//     that token's id.
//   - EncodeUntrusted is for everything that comes from outside: agent
//     actions, tool observations, user content, memories written from them.
//     It never produces an added-token id, special or not: "<|im_start|>" in
//     an observation becomes the ordinary tokens of "<", "|", "im", … So an
//     injection cannot close a chat turn or forge a tool call. (Hugging Face's
//     split_special_tokens / "special tokens off" still matches the
//     non-special added tokens such as "<tool_call>", so it is not enough.)
//   - EncodeSegments encodes a text made of trusted and untrusted segments:
//     added tokens are matched only inside trusted segments, and everything
//     else is tokenized as one text, so that when the untrusted segments hold
//     no added-token text the ids equal Encode of the concatenation.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Segment is a piece of text and whether it may be trusted. Untrusted
// segments never yield added-token ids (see the package documentation).
type Segment struct {
	Text      string // the text
	Untrusted bool   // true for text from outside: actions, observations, memories
}

// kind says where a token id comes from.
type kind uint8

const (
	kindNone    kind = iota // an unused id
	kindBPE                 // a token of the BPE vocabulary
	kindAdded               // an added token that is not special (e.g. "<tool_call>")
	kindSpecial             // a special added token (e.g. "<|im_start|>")
)

// merge is the result of merging a pair of BPE tokens.
type merge struct {
	rank int32 // position in the merges list: lower merges first
	id   int32 // id of the merged token
}

// maxCache bounds the number of pre-tokens whose BPE result is cached.
const maxCache = 1 << 16

// maxCachedPiece is the longest pre-token (in bytes) that is cached.
const maxCachedPiece = 256

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	normalize bool               // apply NFC before pre-tokenization
	vocab     map[string]int     // BPE token in byte-level form ("Ġworld") -> id
	merges    map[[2]int32]merge // (left id, right id) -> merge
	byteID    [256]int32         // id of the BPE token of each single byte
	idToken   []string           // id -> token as written in tokenizer.json
	idBytes   [][]byte           // id -> the bytes the token decodes to
	idKind    []kind             // id -> where it comes from

	added   []string       // added tokens' contents
	addedID map[string]int // added token content -> id
	// firstByte[b] lists the added tokens that start with byte b, longest
	// first, for leftmost-longest matching.
	firstByte [256][]string

	mu    sync.RWMutex
	cache map[string][]int // pre-token -> BPE ids
}

// buildAddedIndex fills firstByte from added.
func (t *Tokenizer) buildAddedIndex() {
	for _, a := range t.added {
		t.firstByte[a[0]] = append(t.firstByte[a[0]], a)
	}
	for b := range t.firstByte {
		slices.SortStableFunc(t.firstByte[b], func(x, y string) int { return len(y) - len(x) })
	}
}

// Encode encodes TRUSTED text: added tokens written in the text, special or
// not, become their ids, as Hugging Face does by default. No special tokens
// are added around the text. Never call it on text that came from outside
// (actions, observations, memories): use EncodeUntrusted.
func (t *Tokenizer) Encode(text string) []int {
	return t.EncodeSegments([]Segment{{Text: text}})
}

// EncodeUntrusted encodes UNTRUSTED text so that no added-token id, special
// or not, can arise from it: "<|im_start|>" or "<tool_call>" in the text
// become ordinary byte-level tokens. Otherwise it is the same as Encode:
// NFC, pre-tokenization, BPE. Use it for agent actions, tool observations,
// user content and anything derived from them.
func (t *Tokenizer) EncodeUntrusted(text string) []int {
	return t.EncodeSegments([]Segment{{Text: text, Untrusted: true}})
}

// EncodeSegments encodes the concatenation of segs. Added tokens are matched
// only inside trusted segments (a match never spans two segments, except
// across adjacent trusted ones); the text between matches is normalized,
// pre-tokenized and BPE-encoded as a whole, across segment boundaries. So
// untrusted segments never yield added-token ids, and when they hold no
// added-token text the result equals Encode of the concatenated text.
//
// Invalid UTF-8 in a segment is replaced by U+FFFD first (one per run of
// invalid bytes).
func (t *Tokenizer) EncodeSegments(segs []Segment) []int {
	// Join the text and record where added tokens were matched.
	type match struct{ start, end, id int }
	var b strings.Builder
	var matches []match
	for i := 0; i < len(segs); {
		seg := segs[i]
		text := strings.ToValidUTF8(seg.Text, "\uFFFD")
		i++
		if !seg.Untrusted {
			// Adjacent trusted segments are one trusted text.
			for ; i < len(segs) && !segs[i].Untrusted; i++ {
				text += strings.ToValidUTF8(segs[i].Text, "\uFFFD")
			}
			base := b.Len()
			for pos := 0; ; {
				start, end, id := t.findAdded(text, pos)
				if start < 0 {
					break
				}
				matches = append(matches, match{base + start, base + end, id})
				pos = end
			}
		}
		b.WriteString(text)
	}
	full := b.String()

	ids := make([]int, 0, len(full)/3+1)
	prev := 0
	for _, m := range matches {
		ids = t.encodeOrdinary(full[prev:m.start], ids)
		ids = append(ids, m.id)
		prev = m.end
	}
	return t.encodeOrdinary(full[prev:], ids)
}

// findAdded returns the leftmost-longest added token in s[from:], as
// [start, end) offsets in s and its id, or -1s when there is none.
func (t *Tokenizer) findAdded(s string, from int) (start, end, id int) {
	for i := from; i < len(s); i++ {
		cands := t.firstByte[s[i]]
		if len(cands) == 0 {
			continue
		}
		for _, a := range cands {
			if strings.HasPrefix(s[i:], a) {
				return i, i + len(a), t.addedID[a]
			}
		}
	}
	return -1, -1, -1
}

// encodeOrdinary appends the ids of s, which holds no added tokens to match:
// NFC, then pre-tokenization, then BPE on each pre-token.
func (t *Tokenizer) encodeOrdinary(s string, ids []int) []int {
	if s == "" {
		return ids
	}
	if t.normalize && !isASCII(s) {
		s = norm.NFC.String(s)
	}
	for i := 0; i < len(s); {
		j := pieceEnd(s, i)
		ids = t.bpe(s[i:j], ids)
		i = j
	}
	return ids
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Decode returns the text of ids. With skipSpecial, special added tokens
// ("<|im_start|>", "<|endoftext|>", …) are left out; non-special added
// tokens ("<tool_call>", "<think>", …) are kept, as in Hugging Face. Ids
// outside the vocabulary are skipped. Byte sequences that are not valid
// UTF-8 (e.g. a multi-byte character cut between tokens) decode to U+FFFD,
// one per maximal invalid subpart, like Rust's String::from_utf8_lossy.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	var buf []byte
	for _, id := range ids {
		if id < 0 || id >= len(t.idKind) || t.idKind[id] == kindNone {
			continue
		}
		if skipSpecial && t.idKind[id] == kindSpecial {
			continue
		}
		buf = append(buf, t.idBytes[id]...)
	}
	return lossyUTF8(buf)
}

// TokenID returns the id of a token written as in tokenizer.json: an added
// token's content ("<|im_end|>") or a BPE token in its byte-level form
// ("Ġworld" for " world").
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.addedID[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// VocabSize returns the number of token ids, added tokens included: one more
// than the largest id (151669 for Qwen3's tokenizer).
func (t *Tokenizer) VocabSize() int { return len(t.idKind) }

// IDToToken returns the token of id as written in tokenizer.json (the
// byte-level form for BPE tokens, e.g. "Ġworld"), or "" for an unknown id.
func (t *Tokenizer) IDToToken(id int) string {
	if id < 0 || id >= len(t.idToken) {
		return ""
	}
	return t.idToken[id]
}

// IsAdded reports whether id is an added token, special or not.
func (t *Tokenizer) IsAdded(id int) bool {
	return id >= 0 && id < len(t.idKind) && t.idKind[id] >= kindAdded
}

// IsSpecial reports whether id is a special added token (the ones Decode
// skips with skipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.idKind) && t.idKind[id] == kindSpecial
}

// lossyUTF8 converts b to a string, replacing each maximal invalid subpart
// (the longest prefix of a valid sequence, or one byte) by U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[:n])
			b = b[n:]
			continue
		}
		sb.WriteRune(utf8.RuneError)
		b = b[invalidPrefixLen(b):]
	}
	return sb.String()
}

// invalidPrefixLen returns the length of the maximal subpart of an invalid
// UTF-8 sequence at the start of b: the bytes that begin a well-formed
// sequence but are cut short, or 1.
func invalidPrefixLen(b []byte) int {
	// Allowed range of the second byte for each lead byte (Unicode Table 3-7).
	lo, hi, n := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		lo, n = 0xA0, 3
	case c == 0xED:
		hi, n = 0x9F, 3
	case c >= 0xE1 && c <= 0xEF:
		n = 3
	case c == 0xF0:
		lo, n = 0x90, 4
	case c == 0xF4:
		hi, n = 0x8F, 4
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if i == 1 && (b[i] < lo || b[i] > hi) || i > 1 && (b[i] < 0x80 || b[i] > 0xBF) {
			break
		}
	}
	return i
}
