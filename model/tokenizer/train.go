package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// This file trains a byte-level BPE tokenizer of the kind Load reads: NFC,
// Qwen's Split pre-tokenizer and ByteLevel, merges learned from a corpus,
// and added tokens after the BPE vocabulary. It writes Hugging Face's
// tokenizer.json format.

// AddedToken is a token matched in trusted text before pre-tokenization.
type AddedToken struct {
	Content string // e.g. "<|im_start|>"
	Special bool   // special tokens are left out by Decode(ids, skipSpecial=true)
}

// QwenAddedTokens returns Qwen3's added tokens, in the order of its
// tokenizer.json (ids 151643–151668 there): <|endoftext|>, <|im_start|>,
// <|im_end|>, the vision and object markers, <tool_call>, </tool_call>, the
// fill-in-the-middle markers, <tool_response>, </tool_response>, <think>,
// </think>. The first fourteen are special.
func QwenAddedTokens() []AddedToken {
	special := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
		"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
		"<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"}
	plain := []string{"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
		"<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
	var out []AddedToken
	for _, s := range special {
		out = append(out, AddedToken{Content: s, Special: true})
	}
	for _, s := range plain {
		out = append(out, AddedToken{Content: s})
	}
	return out
}

// TrainOptions are the settings of Train.
type TrainOptions struct {
	// VocabSize is the most token ids in all: the 256 byte tokens, the
	// merged tokens and the added tokens. Training stops earlier when no
	// pair is frequent enough.
	VocabSize int
	// MinFrequency is the fewest occurrences of a pair that may be merged
	// (0 means 2: a pair seen once is never merged).
	MinFrequency int
	// AddedTokens get the ids after the BPE vocabulary, in order. Their
	// text in the corpus is cut out before training.
	AddedTokens []AddedToken
}

// Train learns byte-level BPE merges from texts and returns the tokenizer
// as tokenizer.json bytes, which Load (and Hugging Face's tokenizers)
// read. The texts are split around the added tokens, normalized to NFC and
// pre-tokenized with Qwen's pattern; each merge joins the most frequent
// adjacent pair of tokens within the pieces, ties going to the pair whose
// (left, right) token strings sort first. The byte tokens take ids 0–255 in
// the order of their byte-level characters, merged tokens the next ids in
// the order they were learned, added tokens the ids after those. The result
// depends only on the pieces' counts and the options: the same corpus, in
// any order, gives the same bytes.
func Train(texts []string, opts TrainOptions) ([]byte, error) {
	if opts.MinFrequency == 0 {
		opts.MinFrequency = 2
	}
	if opts.MinFrequency < 1 {
		return nil, fmt.Errorf("tokenizer train: min frequency %d: want >= 1", opts.MinFrequency)
	}
	if min := 256 + len(opts.AddedTokens); opts.VocabSize < min {
		return nil, fmt.Errorf("tokenizer train: vocab size %d: want at least %d (256 bytes + %d added tokens)", opts.VocabSize, min, len(opts.AddedTokens))
	}
	seen := map[string]bool{}
	for _, a := range opts.AddedTokens {
		if a.Content == "" || seen[a.Content] {
			return nil, fmt.Errorf("tokenizer train: added token %q is empty or given twice", a.Content)
		}
		seen[a.Content] = true
	}

	// Count the pieces.
	counts := map[string]int{}
	for _, text := range texts {
		for _, seg := range splitAdded(strings.ToValidUTF8(text, "\uFFFD"), opts.AddedTokens) {
			if !isASCII(seg) {
				seg = norm.NFC.String(seg)
			}
			for i := 0; i < len(seg); {
				j := pieceEnd(seg, i)
				counts[seg[i:j]]++
				i = j
			}
		}
	}
	pieces := slices.Sorted(maps.Keys(counts))

	// The byte tokens, ids 0–255 in the order of their characters.
	var tokens []string // id -> byte-level string
	ids := map[string]int32{}
	alphabet := make([]rune, 256)
	copy(alphabet, byteRune[:])
	slices.Sort(alphabet)
	for _, r := range alphabet {
		ids[string(r)] = int32(len(tokens))
		tokens = append(tokens, string(r))
	}
	tr := &bpeTrainer{tokens: tokens, pairs: map[[2]int32]int{}, where: map[[2]int32][]int32{}}
	for _, p := range pieces {
		w := make([]int32, len(p))
		for i := 0; i < len(p); i++ {
			w[i] = ids[string(byteRune[p[i]])]
		}
		tr.addWord(w, counts[p])
	}

	budget := opts.VocabSize - len(opts.AddedTokens)
	var merges [][2]string
	for len(tr.tokens) < budget {
		best, n := tr.best()
		if n < opts.MinFrequency {
			break
		}
		merged := tr.tokens[best[0]] + tr.tokens[best[1]]
		id, ok := ids[merged]
		if !ok { // a string already made by another pair keeps its id
			id = int32(len(tr.tokens))
			ids[merged] = id
			tr.tokens = append(tr.tokens, merged)
		}
		merges = append(merges, [2]string{tr.tokens[best[0]], tr.tokens[best[1]]})
		tr.merge(best, id)
	}
	return writeTokenizerJSON(tr.tokens, merges, opts.AddedTokens)
}

// FromJSON builds a tokenizer from the bytes of a tokenizer.json (what
// Train returns), with Load's checks.
func FromJSON(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := build(&f, IDBound{})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// splitAdded returns the text between the added tokens' occurrences
// (leftmost-longest, as EncodeSegments matches them).
func splitAdded(text string, added []AddedToken) []string {
	if len(added) == 0 {
		return []string{text}
	}
	var out []string
	for start := 0; ; {
		best, bestLen := -1, 0
		for _, a := range added {
			i := strings.Index(text[start:], a.Content)
			if i >= 0 && (best < 0 || i < best || i == best && len(a.Content) > bestLen) {
				best, bestLen = i, len(a.Content)
			}
		}
		if best < 0 {
			return append(out, text[start:])
		}
		out = append(out, text[start:start+best])
		start += best + bestLen
	}
}

// bpeTrainer holds the distinct pieces as token sequences with their
// counts, the count of every adjacent pair, and where each pair occurs.
type bpeTrainer struct {
	tokens []string             // id -> byte-level string
	words  [][]int32            // each distinct piece, as token ids
	counts []int                // occurrences of each piece
	pairs  map[[2]int32]int     // adjacent pair -> occurrences over all pieces
	where  map[[2]int32][]int32 // pair -> pieces it occurred in (may hold stale entries and repeats)
	stamp  []int                // per piece: the last merge that visited it
	merges int
}

func (t *bpeTrainer) addWord(w []int32, n int) {
	i := int32(len(t.words))
	t.words = append(t.words, w)
	t.counts = append(t.counts, n)
	t.stamp = append(t.stamp, -1)
	for k := 0; k+1 < len(w); k++ {
		p := [2]int32{w[k], w[k+1]}
		t.pairs[p] += n
		t.where[p] = append(t.where[p], i)
	}
}

// best returns the most frequent pair (ties: the smaller token strings).
func (t *bpeTrainer) best() ([2]int32, int) {
	var best [2]int32
	n := 0
	for p, c := range t.pairs {
		if c > n || c == n && n > 0 && t.less(p, best) {
			best, n = p, c
		}
	}
	return best, n
}

func (t *bpeTrainer) less(a, b [2]int32) bool {
	if x, y := t.tokens[a[0]], t.tokens[b[0]]; x != y {
		return x < y
	}
	return t.tokens[a[1]] < t.tokens[b[1]]
}

// merge replaces every occurrence of pair p (left to right, without
// overlaps) by id, and updates the pair counts of the pieces it touched.
func (t *bpeTrainer) merge(p [2]int32, id int32) {
	t.merges++
	for _, wi := range t.where[p] {
		if t.stamp[wi] == t.merges {
			continue
		}
		t.stamp[wi] = t.merges
		w, n := t.words[wi], t.counts[wi]
		if !hasPair(w, p) {
			continue
		}
		for k := 0; k+1 < len(w); k++ {
			q := [2]int32{w[k], w[k+1]}
			if t.pairs[q] -= n; t.pairs[q] == 0 {
				delete(t.pairs, q)
			}
		}
		out := w[:0:0]
		for k := 0; k < len(w); k++ {
			if k+1 < len(w) && w[k] == p[0] && w[k+1] == p[1] {
				out = append(out, id)
				k++
			} else {
				out = append(out, w[k])
			}
		}
		t.words[wi] = out
		for k := 0; k+1 < len(out); k++ {
			q := [2]int32{out[k], out[k+1]}
			t.pairs[q] += n
			if out[k] == id || out[k+1] == id {
				t.where[q] = append(t.where[q], wi)
			}
		}
	}
	delete(t.where, p)
	delete(t.pairs, p)
}

func hasPair(w []int32, p [2]int32) bool {
	for k := 0; k+1 < len(w); k++ {
		if w[k] == p[0] && w[k+1] == p[1] {
			return true
		}
	}
	return false
}

// byteLevelJSONText is the ByteLevel pre-tokenizer step, post-processor and
// decoder as Qwen3's tokenizer.json writes them.
const byteLevelJSONText = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`

// writeTokenizerJSON writes a tokenizer.json in Qwen3's layout (keys in its
// order, the vocabulary by id, merges as pairs), indented by two spaces.
func writeTokenizerJSON(tokens []string, merges [][2]string, added []AddedToken) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	for i, a := range added {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"content":%s,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":%t}`,
			len(tokens)+i, quoteJSON(a.Content), a.Special)
	}
	b.WriteString(`],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":`)
	b.WriteString(quoteJSON(qwenPattern))
	b.WriteString(`},"behavior":"Isolated","invert":false},` + byteLevelJSONText + `]},"post_processor":` + byteLevelJSONText +
		`,"decoder":` + byteLevelJSONText + `,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"",` +
		`"end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{`)
	for id, tok := range tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", quoteJSON(tok), id)
	}
	b.WriteString(`},"merges":[`)
	for i, m := range merges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("[" + quoteJSON(m[0]) + "," + quoteJSON(m[1]) + "]")
	}
	b.WriteString("]}}")
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("tokenizer train: writing tokenizer.json: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// quoteJSON writes s as a JSON string without HTML escaping.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string: cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}
