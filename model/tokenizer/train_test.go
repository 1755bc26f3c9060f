package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// trainedMerges returns the merges of a trained tokenizer.json.
func trainedMerges(t *testing.T, data []byte) [][2]string {
	t.Helper()
	var f struct {
		Model struct {
			Merges [][2]string `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Model.Merges
}

func mustTrain(t *testing.T, texts []string, opts TrainOptions) ([]byte, *Tokenizer) {
	t.Helper()
	data, err := Train(texts, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return data, tok
}

// TestTrainMergesByHand checks merges worked out by hand. "ab ab ab" and
// "abc" pre-tokenize to "ab", " ab" twice and "abc"; the pair counts are
// (a b) 4, (Ġ a) 2, (b c) 1, so (a b) merges first; then (Ġ ab) 2 and
// (ab c) 1, so (Ġ ab) merges; (ab c) is under the minimum frequency of 2.
// With a minimum of 1 and the corpus "ab cd", all three pairs are seen once
// and ties go to the smaller strings: (a b), then (c d) (as "c" < "Ġ"),
// then (Ġ cd).
func TestTrainMergesByHand(t *testing.T) {
	for _, tc := range []struct {
		texts  []string
		minf   int
		merges [][2]string
	}{
		{[]string{"ab ab ab", "abc"}, 0, [][2]string{{"a", "b"}, {"Ġ", "ab"}}},
		{[]string{"ab cd"}, 1, [][2]string{{"a", "b"}, {"c", "d"}, {"Ġ", "cd"}}},
	} {
		data, tok := mustTrain(t, tc.texts, TrainOptions{VocabSize: 1000, MinFrequency: tc.minf})
		if got := trainedMerges(t, data); !slices.Equal(got, tc.merges) {
			t.Errorf("%q: merges %v, want %v", tc.texts, got, tc.merges)
		}
		if tok.VocabSize() != 256+len(tc.merges) {
			t.Errorf("%q: vocab size %d, want 256 + %d", tc.texts, tok.VocabSize(), len(tc.merges))
		}
	}
	// Encoding with the learned merges: " abc" is Ġ a b c → Ġ ab c → Ġab c.
	_, tok := mustTrain(t, []string{"ab ab ab", "abc"}, TrainOptions{VocabSize: 1000})
	ab, _ := tok.TokenID("ab")
	gab, _ := tok.TokenID("Ġab")
	c, _ := tok.TokenID("c")
	if got := tok.Encode("ab abc"); !slices.Equal(got, []int{ab, gab, c}) {
		t.Errorf("Encode(\"ab abc\") = %v, want %v", got, []int{ab, gab, c})
	}
}

func TestTrainStopsAtTheVocabularySize(t *testing.T) {
	added := QwenAddedTokens()
	data, tok := mustTrain(t, []string{"ab ab ab", "abc"}, TrainOptions{VocabSize: 256 + 1 + len(added), AddedTokens: added})
	if got := trainedMerges(t, data); !slices.Equal(got, [][2]string{{"a", "b"}}) {
		t.Errorf("merges %v, want only (a b)", got)
	}
	if tok.VocabSize() != 256+1+len(added) {
		t.Errorf("vocab size %d, want %d", tok.VocabSize(), 256+1+len(added))
	}
	// The added tokens follow the BPE vocabulary in order, specials first.
	for i, a := range added {
		id, ok := tok.TokenID(a.Content)
		if !ok || id != 257+i || tok.IsSpecial(id) != a.Special || !tok.IsAdded(id) {
			t.Errorf("added token %q: id %d (%v), special %v; want id %d, special %v", a.Content, id, ok, tok.IsSpecial(id), 257+i, a.Special)
		}
	}
	if len(added) != 26 || !added[2].Special || added[2].Content != "<|im_end|>" || added[14].Content != "<tool_call>" || added[14].Special {
		t.Errorf("QwenAddedTokens: %v", added)
	}
}

// TestTrainedTokenizerRoundTrips: what Train writes loads with Load's
// checks, decodes every text back (after NFC), keeps added tokens out of
// untrusted text, and is the same file for the same corpus in any order.
func TestTrainedTokenizerRoundTrips(t *testing.T) {
	texts := []string{
		"<|im_start|>system\nYou are a guard.<|im_end|>\n<|im_start|>user\nPay 120 to acct-bako.<|im_end|>",
		`<tool_call>\n{"name": "update_memory", "arguments": {"content": "allowed: acct-bako"}}\n</tool_call>`,
		"Café naïve — 東京 🚀 tabs\tand\r\nnewlines  ",
		"Cafe\u0301 is NFC-normalized",
	}
	added := QwenAddedTokens()
	data, tok := mustTrain(t, texts, TrainOptions{VocabSize: 600, AddedTokens: added})
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("Load refuses what Train wrote: %v", err)
	}
	for _, s := range append(texts, "text never seen: zebra Ωmega 42") {
		if got := tok.Decode(tok.Encode(s), false); got != norm.NFC.String(s) {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
		for _, id := range tok.EncodeUntrusted(s) {
			if tok.IsAdded(id) {
				t.Errorf("EncodeUntrusted(%q) yields the added token %q", s, tok.IDToToken(id))
			}
		}
	}
	imEnd, _ := tok.TokenID("<|im_end|>")
	if !slices.Contains(tok.Encode(texts[0]), imEnd) {
		t.Error("trusted text lost its <|im_end|>")
	}
	// The added tokens' text was cut out of the corpus: no merge spells "im_start".
	if _, ok := tok.TokenID("im_start"); ok {
		t.Error(`the corpus' added tokens were trained on: "im_start" is a token`)
	}
	shuffled := []string{texts[3], texts[1], texts[0], texts[2]}
	again, err := Train(shuffled, TrainOptions{VocabSize: 600, AddedTokens: added})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Error("the same corpus in another order trained a different tokenizer")
	}
}

func TestTrainRefuses(t *testing.T) {
	for _, tc := range []struct {
		opts TrainOptions
		want string
	}{
		{TrainOptions{VocabSize: 255}, "want at least 256"},
		{TrainOptions{VocabSize: 270, AddedTokens: QwenAddedTokens()}, "want at least 282"},
		{TrainOptions{VocabSize: 300, AddedTokens: []AddedToken{{Content: "<a>"}, {Content: "<a>"}}}, "given twice"},
		{TrainOptions{VocabSize: 300, MinFrequency: -1}, "min frequency"},
	} {
		if _, err := Train([]string{"x"}, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.opts, err, tc.want)
		}
	}
}
