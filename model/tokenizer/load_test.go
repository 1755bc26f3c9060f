package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyJSON returns a small tokenizer.json in Qwen's format: the 256 byte
// tokens (id = byte value), "bc" 256, "ab" 257, "abc" 258, merges
// (b c), (a b), (a bc) in that rank order, and two added tokens. edit may
// change it before it is written.
func tinyJSON(t testing.TB, edit func(doc map[string]any)) string {
	t.Helper()
	vocab := map[string]int{"bc": 256, "ab": 257, "abc": 258}
	for b := range 256 {
		vocab[string(byteRune[b])] = b
	}
	doc := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 259, "content": "<s>", "special": true, "normalized": false},
			{"id": 260, "content": "<tool>", "special": false, "normalized": false},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab":  vocab,
			"merges": [][2]string{{"b", "c"}, {"a", "b"}, {"a", "bc"}},
		},
	}
	if edit != nil {
		edit(doc)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMergeOrder checks BPE on merges worked out by hand: the lowest rank
// merges first wherever it is, ties go left to right.
func TestMergeOrder(t *testing.T) {
	tok, err := Load(tinyJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		want []int
	}{
		{"abc", []int{258}},       // (b c) first, then (a bc); (a b) never applies
		{"abab", []int{257, 257}}, // (a b) twice
		{"cab", []int{'c', 257}},  // no (c a) merge
		{"bcab", []int{256, 257}}, // no (bc ab) merge
		{"ab<s>c", []int{257, 259, 'c'}},
		{"a <tool>", []int{'a', ' ', 260}},
	}
	for _, c := range cases {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := tok.VocabSize(); got != 261 {
		t.Errorf("VocabSize = %d, want 261", got)
	}
	// The "a b" string form of merges gives the same tokenizer.
	tok2, err := Load(tinyJSON(t, func(doc map[string]any) {
		doc["model"].(map[string]any)["merges"] = []string{"b c", "a b", "a bc"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("abc abab"); !slices.Equal(got, tok.Encode("abc abab")) {
		t.Errorf("string merges: Encode = %v, want %v", got, tok.Encode("abc abab"))
	}
}

// TestLoadRefuses checks that what the tokenizer does not implement is an
// error, not a silently different tokenization.
func TestLoadRefuses(t *testing.T) {
	model := func(doc map[string]any) map[string]any { return doc["model"].(map[string]any) }
	cases := []struct {
		name string
		edit func(doc map[string]any)
		want string
	}{
		{"other normalizer", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} }, "only NFC"},
		{"other pattern", func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+`}
		}, "pre_tokenizer"},
		{"other model", func(d map[string]any) { model(d)["type"] = "WordPiece" }, "only BPE"},
		{"dropout", func(d map[string]any) { model(d)["dropout"] = 0.1 }, "dropout"},
		{"byte fallback", func(d map[string]any) { model(d)["byte_fallback"] = true }, "byte_fallback"},
		{"merge out of vocabulary", func(d map[string]any) { model(d)["merges"] = [][2]string{{"x", "y"}} }, "not in the vocabulary"},
		{"missing byte token", func(d map[string]any) { delete(model(d)["vocab"].(map[string]int), "a") }, "byte 0x61"},
		{"normalized added token", func(d map[string]any) {
			d["added_tokens"] = []map[string]any{{"id": 259, "content": "<s>", "normalized": true}}
		}, "normalized=true"},
		{"lstrip added token", func(d map[string]any) {
			d["added_tokens"] = []map[string]any{{"id": 259, "content": "<s>", "lstrip": true}}
		}, "lstrip"},
		{"added token on a BPE id", func(d map[string]any) {
			d["added_tokens"] = []map[string]any{{"id": 258, "content": "<s>"}}
		}, "also the BPE token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(tinyJSON(t, c.edit))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load error = %v, want it to say %q", err, c.want)
			}
		})
	}
}
