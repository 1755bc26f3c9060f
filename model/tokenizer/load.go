package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// qwenPattern is the Split pre-tokenizer regex of Qwen2/Qwen3 (and of
// GPT-4's cl100k). Load accepts only this pattern because pretokenize.go
// implements it by hand.
const qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// fileJSON is the subset of Hugging Face's tokenizer.json that we read.
type fileJSON struct {
	AddedTokens []addedTokenJSON `json:"added_tokens"`
	Normalizer  json.RawMessage  `json:"normalizer"`
	PreTok      json.RawMessage  `json:"pre_tokenizer"`
	Decoder     json.RawMessage  `json:"decoder"`
	Model       struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Load reads a Hugging Face tokenizer. path is a tokenizer.json file, a
// gzip-compressed tokenizer.json.gz, or a directory holding either of them
// (tokenizer.json is preferred when both are there).
//
// Only what Qwen2/Qwen3 tokenizers use is supported: an NFC (or no)
// normalizer, the Split pre-tokenizer with Qwen's pattern followed by
// ByteLevel, a byte-level BPE model without dropout, unknown token or byte
// fallback, and added tokens matched on the raw text (normalized: false)
// without lstrip/rstrip/single_word. Anything else is an error, never a
// silently different tokenization.
//
// Every id must be below MaxVocab; LoadWithin bounds them by a model's
// vocabulary instead.
func Load(path string) (*Tokenizer, error) {
	return LoadWithin(path, IDBound{})
}

// MaxVocab is the most token ids a tokenizer may have: the bound the
// model's configuration puts on vocab_size (2²²). A tokenizer's arrays are
// sized by its largest id, so a larger one is refused before anything is
// allocated.
const MaxVocab = 1 << 22

// IDBound bounds the ids of a tokenizer.json: every id must be below
// VocabSize, the vocabulary of the model the tokenizer is for, which
// DeclaredBy names in errors (e.g. "vocab_size of runs/x/config.json").
// The zero IDBound is MaxVocab.
type IDBound struct {
	VocabSize  int
	DeclaredBy string
}

func (b IDBound) limit() (int, string) {
	if b.VocabSize <= 0 || b.VocabSize > MaxVocab {
		return MaxVocab, fmt.Sprintf("the most a tokenizer may have (%d)", MaxVocab)
	}
	return b.VocabSize, fmt.Sprintf("the model's vocabulary (%d ids, the %s)", b.VocabSize, b.DeclaredBy)
}

// LoadWithin is Load with every id of the file bounded by b: an id outside
// it is an error naming the file, the field and the token, found before
// anything is sized by it (in time and memory linear in the file).
func LoadWithin(path string, b IDBound) (*Tokenizer, error) {
	data, file, err := readTokenizerFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parseWithin(data, b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", file, err)
	}
	return t, nil
}

// maxTokenizerBytes bounds tokenizer.json, compressed or not (Qwen3's is
// 11 MB; the largest vocabularies' are ~35 MB).
const maxTokenizerBytes = 256 << 20

// parse builds a tokenizer from the text of a tokenizer.json: a key given
// twice anywhere (a vocabulary entry, say) is an error, not the last one
// silently winning.
func parse(data []byte) (*Tokenizer, error) { return parseWithin(data, IDBound{}) }

// parseWithin is parse with the ids bounded by b.
func parseWithin(data []byte, b IDBound) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if where, problem, ok := strictjson.Check(data); !ok {
		return nil, fmt.Errorf("%s: %s", where, problem)
	}
	return build(&f, b)
}

// checkIDs refuses an id of f that is negative or not below b's limit,
// naming the field and the token (of the vocabulary, the largest id out of
// bounds; then of the added tokens, the first).
func checkIDs(f *fileJSON, b IDBound) error {
	limit, what := b.limit()
	worst, worstTok := -1, ""
	for tok, id := range f.Model.Vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab %q: negative id %d", strictjson.ShortKey(tok), id)
		}
		if id >= limit && (id > worst || (id == worst && tok < worstTok)) {
			worst, worstTok = id, tok
		}
	}
	if worst >= 0 {
		return fmt.Errorf("model.vocab %q: id %d is outside %s", strictjson.ShortKey(worstTok), worst, what)
	}
	for i, a := range f.AddedTokens {
		if a.ID < 0 {
			return fmt.Errorf("added_tokens[%d] %q: negative id %d", i, strictjson.ShortKey(a.Content), a.ID)
		}
		if a.ID >= limit {
			return fmt.Errorf("added_tokens[%d] %q: id %d is outside %s", i, strictjson.ShortKey(a.Content), a.ID, what)
		}
	}
	return nil
}

// readTokenizerFile returns the (decompressed) bytes of the tokenizer.json
// that path names, and the name of the file actually read.
func readTokenizerFile(path string) ([]byte, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("tokenizer: %w", err)
	}
	file := path
	if st.IsDir() {
		file = ""
		for _, name := range []string{"tokenizer.json", "tokenizer.json.gz"} {
			p := filepath.Join(path, name)
			if _, err := os.Stat(p); err == nil {
				file = p
				break
			}
		}
		if file == "" {
			return nil, "", fmt.Errorf("tokenizer: directory %s holds neither tokenizer.json nor tokenizer.json.gz", path)
		}
	}
	if st, err := os.Stat(file); err != nil {
		return nil, "", fmt.Errorf("tokenizer: %w", err)
	} else if st.Size() > maxTokenizerBytes {
		return nil, "", fmt.Errorf("tokenizer %s: %d bytes, more than the %d a tokenizer may have", file, st.Size(), maxTokenizerBytes)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("tokenizer: %w", err)
	}
	if strings.HasSuffix(file, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, "", fmt.Errorf("tokenizer %s: %w", file, err)
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxTokenizerBytes+1))
		if err != nil {
			return nil, "", fmt.Errorf("tokenizer %s: %w", file, err)
		}
		if len(data) > maxTokenizerBytes {
			return nil, "", fmt.Errorf("tokenizer %s: decompresses to more than %d bytes", file, maxTokenizerBytes)
		}
	}
	return data, file, nil
}

// build checks that f describes a tokenizer we implement exactly and
// assembles it.
func build(f *fileJSON, b IDBound) (*Tokenizer, error) {
	if err := checkIDs(f, b); err != nil { // before anything is sized by an id
		return nil, err
	}
	if err := checkSupported(f); err != nil {
		return nil, err
	}
	m := &f.Model
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{
		normalize: len(f.Normalizer) > 0 && string(f.Normalizer) != "null",
		vocab:     m.Vocab,
		merges:    make(map[[2]int32]merge, len(merges)),
		addedID:   make(map[string]int, len(f.AddedTokens)),
		cache:     make(map[string][]int),
	}
	if err := t.setVocab(m.Vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.setMerges(merges); err != nil {
		return nil, err
	}
	if err := t.setAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	t.buildAddedIndex()
	return t, nil
}

// checkSupported refuses a normalizer, pre-tokenizer, decoder or model
// setting this package does not implement.
func checkSupported(f *fileJSON) error {
	if err := checkNormalizer(f.Normalizer); err != nil {
		return err
	}
	if err := checkPreTokenizer(f.PreTok); err != nil {
		return err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return err
	}
	m := &f.Model
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model.type %q: only BPE is supported", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout %v: BPE dropout is not supported", *m.Dropout)
	case m.UnkToken != nil:
		return fmt.Errorf("model.unk_token %q: unknown tokens are not supported", *m.UnkToken)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return errors.New("model.continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return errors.New("model.end_of_word_suffix is not supported")
	case m.ByteFallback:
		return errors.New("model.byte_fallback is not supported")
	case m.IgnoreMerges:
		return errors.New("model.ignore_merges is not supported")
	}
	return nil
}

// setVocab sizes the id tables for the vocabulary and the added tokens
// (no negative id) and fills them with the vocabulary's BPE tokens (no id
// twice, every byte-level token there).
func (t *Tokenizer) setVocab(vocab map[string]int, added []addedTokenJSON) error {
	size := 0
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab %q: negative id %d", tok, id)
		}
		size = max(size, id+1)
	}
	for _, a := range added {
		if a.ID < 0 {
			return fmt.Errorf("added token %q: negative id %d", a.Content, a.ID)
		}
		size = max(size, a.ID+1)
	}
	t.idToken = make([]string, size)
	t.idBytes = make([][]byte, size)
	t.idKind = make([]kind, size)

	for tok, id := range vocab {
		if t.idKind[id] != kindNone {
			return fmt.Errorf("model.vocab %q: id %d is used twice", tok, id)
		}
		t.idKind[id] = kindBPE
		t.idToken[id] = tok
		t.idBytes[id] = byteLevelDecode(tok)
	}
	for b := range 256 {
		id, ok := vocab[string(byteRune[b])]
		if !ok {
			return fmt.Errorf("model.vocab lacks the byte-level token for byte 0x%02x", b)
		}
		t.byteID[b] = int32(id)
	}
	return nil
}

// setMerges ranks the merges (their order), each of tokens of the
// vocabulary.
func (t *Tokenizer) setMerges(merges [][2]string) error {
	var buf []byte
	for rank, pair := range merges {
		left, okL := t.vocab[pair[0]]
		right, okR := t.vocab[pair[1]]
		buf = append(append(buf[:0], pair[0]...), pair[1]...)
		merged, okM := t.vocab[string(buf)]
		if !okL || !okR || !okM {
			return fmt.Errorf("model.merges[%d] %q %q: token not in the vocabulary", rank, pair[0], pair[1])
		}
		// A repeated pair takes its last rank, as in Hugging Face's map.
		t.merges[[2]int32{int32(left), int32(right)}] = merge{rank: int32(rank), id: int32(merged)}
	}
	return nil
}

// setAddedTokens adds the added tokens, matched on the raw text: none
// empty, normalized, stripped or single-word, none on a BPE token's id,
// none listed twice.
func (t *Tokenizer) setAddedTokens(added []addedTokenJSON) error {
	for _, a := range added {
		switch {
		case a.Content == "":
			return fmt.Errorf("added token id %d: empty content", a.ID)
		case a.Normalized:
			return fmt.Errorf("added token %q: normalized=true is not supported", a.Content)
		case a.LStrip || a.RStrip || a.SingleWord:
			return fmt.Errorf("added token %q: lstrip/rstrip/single_word are not supported", a.Content)
		}
		if t.idKind[a.ID] == kindBPE {
			// A BPE merge could then produce an added-token id from untrusted
			// text; refuse rather than weaken EncodeUntrusted.
			return fmt.Errorf("added token %q: id %d is also the BPE token %q", a.Content, a.ID, t.idToken[a.ID])
		}
		if _, dup := t.addedID[a.Content]; dup {
			return fmt.Errorf("added token %q: listed twice", a.Content)
		}
		t.idKind[a.ID] = kindAdded
		if a.Special {
			t.idKind[a.ID] = kindSpecial
		}
		t.idToken[a.ID] = a.Content
		t.idBytes[a.ID] = byteLevelDecode(a.Content)
		t.addedID[a.Content] = a.ID
		t.added = append(t.added, a.Content)
	}
	return nil
}

// parseMerges accepts both tokenizer.json merge formats: ["a b", ...] and
// [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: want a list of \"a b\" strings or of [a, b] pairs: %w", err)
	}
	pairs = make([][2]string, len(lines))
	for i, line := range lines {
		parts := strings.Split(line, " ")
		if len(parts) != 2 {
			return nil, fmt.Errorf("model.merges[%d] %q: want two tokens separated by one space", i, line)
		}
		pairs[i] = [2]string{parts[0], parts[1]}
	}
	return pairs, nil
}

func checkNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var n struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &n); err != nil || n.Type != "NFC" {
		return fmt.Errorf("normalizer %s: only NFC (or none) is supported", raw)
	}
	return nil
}

// byteLevelJSON is the ByteLevel pre-tokenizer, post-processor or decoder.
type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

func checkPreTokenizer(raw json.RawMessage) error {
	var seq struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	bad := fmt.Errorf("pre_tokenizer: only Sequence[Split(Qwen pattern, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)] is supported, got %s", raw)
	if err := json.Unmarshal(raw, &seq); err != nil || seq.Type != "Sequence" || len(seq.PreTokenizers) != 2 {
		return bad
	}
	var split struct {
		Type    string `json:"type"`
		Pattern struct {
			Regex string `json:"Regex"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(seq.PreTokenizers[0], &split); err != nil ||
		split.Type != "Split" || split.Pattern.Regex != qwenPattern || split.Behavior != "Isolated" || split.Invert {
		return bad
	}
	var bl byteLevelJSON
	if err := json.Unmarshal(seq.PreTokenizers[1], &bl); err != nil ||
		bl.Type != "ByteLevel" || bl.AddPrefixSpace || bl.UseRegex == nil || *bl.UseRegex {
		return bad
	}
	return nil
}

func checkDecoder(raw json.RawMessage) error {
	var bl byteLevelJSON
	if err := json.Unmarshal(raw, &bl); err != nil || bl.Type != "ByteLevel" {
		return fmt.Errorf("decoder %s: only ByteLevel is supported", raw)
	}
	return nil
}
