package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// FuzzParse: any tokenizer.json text either loads or is an error, never a
// panic or a runaway allocation; a loaded one encodes and decodes.
func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile(tinyJSON(f, nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(strings.Replace(string(seed), `"ab":257`, `"ab":257,"ab":1`, 1))) // a vocabulary entry given twice
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 99999999999}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parse(data)
		if err != nil {
			return
		}
		ids := tok.EncodeUntrusted("abc <s> x")
		tok.Decode(ids, false)
	})
}

// TestParseRefusesARepeatedVocabularyEntry: a tokenizer.json whose vocab
// gives a token twice (the last id would silently win) is refused.
func TestParseRefusesARepeatedVocabularyEntry(t *testing.T) {
	seed, err := os.ReadFile(tinyJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(seed), `"ab":257`, `"ab":257,"ab":1`, 1)
	if bad == string(seed) {
		t.Fatal("the seed has no \"ab\":257 to repeat")
	}
	if _, err := parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "model.vocab.ab: given twice") {
		t.Fatalf("error %v", err)
	}
}

// FuzzLoadWithin: a tokenizer.json file loaded within a model's vocabulary (of
// 300 ids) either loads, every id below 300, or is an error naming the
// file; never a panic or an allocation sized by an id.
func FuzzLoadWithin(f *testing.F) {
	seed, err := os.ReadFile(tinyJSON(f, nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, id := range []string{"1000000000", "1099511627776", "4611686018427387904", "20000000", "300", "-1"} {
		f.Add([]byte(strings.Replace(string(seed), `"ab":257`, `"ab":`+id, 1)))
		f.Add([]byte(strings.Replace(string(seed), `"id":260`, `"id":`+id, 1)))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "tokenizer.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tok, err := LoadWithin(path, IDBound{VocabSize: 300, DeclaredBy: "test"})
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if tok.VocabSize() > 300 {
			t.Fatalf("%d ids loaded within 300", tok.VocabSize())
		}
	})
}

// TestTokenizerIDsAreBounded: ids of 10⁹, 2⁴⁰, 2⁶² and 2·10⁷ (in
// the vocabulary, 10⁹ for an added token), which grew eval to 24 GB, ran
// out of memory, panicked in makeslice or spent 2 GB, are refused at once
// naming the file, the field and the token, in little memory; within a
// model's vocabulary, an id at its size is refused too.
func TestTokenizerIDsAreBounded(t *testing.T) {
	cases := []struct {
		edit  func(map[string]any)
		bound IDBound
		want  string
	}{
		{vocabID(1e9), IDBound{}, `model.vocab "ab": id 1000000000 is outside the most a tokenizer may have (4194304)`},
		{vocabID(1 << 40), IDBound{}, `model.vocab "ab": id 1099511627776 is outside`},
		{vocabID(1 << 62), IDBound{}, `model.vocab "ab": id 4611686018427387904 is outside`},
		{vocabID(2e7), IDBound{VocabSize: 151936, DeclaredBy: "vocab_size of ckpt/config.json"}, `model.vocab "ab": id 20000000 is outside the model's vocabulary (151936 ids, the vocab_size of ckpt/config.json)`},
		{vocabID(300), IDBound{VocabSize: 300, DeclaredBy: "vocab_size of ckpt/config.json"}, `model.vocab "ab": id 300 is outside the model's vocabulary (300 ids`},
		{func(d map[string]any) { d["added_tokens"].([]map[string]any)[1]["id"] = 1e9 }, IDBound{}, `added_tokens[1] "<tool>": id 1000000000 is outside`},
	}
	for _, c := range cases {
		path := tinyJSON(t, c.edit)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := LoadWithin(path, c.bound)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("error %v, want %q naming %s", err, c.want, path)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 || took > 2*time.Second {
			t.Errorf("%s: %d bytes allocated, %v", c.want, alloc, took)
		}
	}
	// The tiny tokenizer (ids up to 260) loads within 261 ids.
	if _, err := LoadWithin(tinyJSON(t, nil), IDBound{VocabSize: 261, DeclaredBy: "x"}); err != nil {
		t.Error(err)
	}
}

// vocabID sets the id of the vocabulary token "ab".
func vocabID(id float64) func(map[string]any) {
	return func(d map[string]any) { d["model"].(map[string]any)["vocab"].(map[string]int)["ab"] = int(id) }
}
