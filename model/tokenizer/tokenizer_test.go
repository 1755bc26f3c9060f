package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// bundled is the tokenizer bundled with the repository (assets/qwen3).
const bundled = "../../assets/qwen3"

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen loads the bundled Qwen3 tokenizer once per test binary.
func qwen(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = Load(bundled) })
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

type refCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readRef(t *testing.T, path string) []refCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []refCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cases
}

// TestEncodeMatchesHuggingFace checks every reference string against the ids
// Hugging Face's tokenizers produced, and that decoding gives back NFC(x).
func TestEncodeMatchesHuggingFace(t *testing.T) {
	tok := qwen(t)
	var corpus []string
	data, err := os.ReadFile("testdata/corpus_public.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	ref := readRef(t, "testdata/ref_public.json")
	if len(ref) != len(corpus) || len(ref) != 202 {
		t.Fatalf("corpus has %d strings, reference %d; want 202 each", len(corpus), len(ref))
	}
	for i, c := range ref {
		if c.Text != corpus[i] {
			t.Fatalf("reference %d text %q differs from corpus %q", i, c.Text, corpus[i])
		}
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
			continue
		}
		if dec, want := tok.Decode(got, false), norm.NFC.String(c.Text); dec != want {
			t.Errorf("Decode(Encode(%q)) = %q, want NFC %q", c.Text, dec, want)
		}
	}
}

// TestSharedReference runs the same check against ../shared when it exists,
// so a change to the shared reference is noticed.
func TestSharedReference(t *testing.T) {
	path := "../../../shared/reference/tokenizer/ref_public.json"
	if _, err := os.Stat(path); err != nil {
		t.Skip("no ../shared beside the checkout")
	}
	tok := qwen(t)
	for _, c := range readRef(t, path) {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) && len(got)+len(c.IDs) > 0 {
			t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
		}
	}
}

func TestLoadForms(t *testing.T) {
	plain := "../../../shared/qwen3"
	paths := []string{bundled, filepath.Join(bundled, "tokenizer.json.gz")}
	if _, err := os.Stat(plain); err == nil {
		paths = append(paths, plain, filepath.Join(plain, "tokenizer.json"))
	}
	for _, p := range paths {
		tok, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%s): %v", p, err)
		}
		if got := tok.Encode("Hello <|im_start|> world"); !slices.Equal(got, []int{9707, 220, 151644, 1879}) {
			t.Errorf("Load(%s): Encode = %v", p, got)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither tokenizer.json") {
		t.Errorf("Load(empty dir) error = %v", err)
	}
}
