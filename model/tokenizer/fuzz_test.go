package tokenizer

import (
	"os"
	"strings"
	"testing"
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
