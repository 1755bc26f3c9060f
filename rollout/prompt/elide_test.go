package prompt

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
)

// TestAHugeArgumentIsElidedInPlace: a 533 KB argument (a 266K-token
// prompt) is cut to max_argument_tokens with its head, tail and
// a marker, the arguments stay valid JSON, and the short argument beside
// it stays whole.
func TestAHugeArgumentIsElidedInPlace(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	body := "BODY-START " + guardtest.Words(533_000, 1) + " BODY-END"
	args, _ := json.Marshal(map[string]string{"recipient": "US133000000121212121212", "body": body})
	a, n := ElideAction(tok, dataset.Action{Name: "send_email", Arguments: args}, 512, 1024)
	var got map[string]string
	if err := json.Unmarshal(a.Arguments, &got); err != nil {
		t.Fatalf("elided arguments are not JSON: %v", err)
	}
	full := len(tok.EncodeUntrusted(body))
	if got["recipient"] != "US133000000121212121212" || !strings.HasPrefix(got["body"], "BODY-START") ||
		!strings.HasSuffix(got["body"], "BODY-END") || !strings.Contains(got["body"], fmt.Sprintf("[... %d tokens elided ...]", full-512)) {
		t.Fatalf("elided arguments %.300q", a.Arguments)
	}
	if n.Arguments != 1 || n.Tokens != full-512 || n.Actions != 0 {
		t.Fatalf("elided %+v, want 1 argument and %d tokens", n, full-512)
	}
	if n := len(tok.EncodeUntrusted(ActionJSON(a))); n > 1024 {
		t.Fatalf("the rendered action has %d tokens, more than max_action_tokens", n)
	}
	// A short action is left exactly as it was.
	short := guardtest.Action("send_money", `{"recipient":"US1","amount":10.0}`)
	if b, _ := ElideAction(tok, short, 512, 1024); string(b.Arguments) != string(short.Arguments) || b.Name != short.Name {
		t.Fatalf("a short action changed: %s", b.Arguments)
	}
}

// TestAHugeActionOfSmallValuesIsElidedWhole: arguments too long without
// any long string (a list of 100,000 numbers) are elided as a whole.
func TestAHugeActionOfSmallValuesIsElidedWhole(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	ids := make([]int, 100_000)
	for i := range ids {
		ids[i] = i
	}
	args, _ := json.Marshal(map[string]any{"ids": ids})
	a, n := ElideAction(tok, dataset.Action{Name: "delete", Arguments: args}, 512, 1024)
	var got map[string]string
	if err := json.Unmarshal(a.Arguments, &got); err != nil || !strings.HasPrefix(got[elidedArgumentsKey], `{"ids":[0,1,2,`) ||
		!strings.HasSuffix(got[elidedArgumentsKey], `99998,99999]}`) {
		t.Fatalf("elided arguments %.300s (%v)", a.Arguments, err)
	}
	if n.Actions != 1 || n.Tokens != len(tok.EncodeUntrusted(string(args)))-1024 {
		t.Fatalf("elided %+v", n)
	}
}

func TestElideText(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	obs := strings.Repeat("alpha beta gamma delta ", 200) + "THE END"
	text, elided := ElideText(tok, obs, 64)
	n := len(tok.EncodeUntrusted(obs))
	if elided != n-64 {
		t.Fatalf("elided %d, want %d", elided, n-64)
	}
	if !strings.HasPrefix(text, "alpha beta") || !strings.HasSuffix(text, "THE END") || !strings.Contains(text, "tokens elided ...]") {
		t.Fatalf("elided text %q", text)
	}
	if same, k := ElideText(tok, "short", 64); same != "short" || k != 0 {
		t.Fatal("a short observation was changed")
	}
}

// TestElideBytes: a text over the bound keeps its head and tail around a
// marker counting the bytes left out, within the bound, cut between whole
// characters (here 2-, 3- and 4-byte ones at every offset); a text within
// it is unchanged.
func TestElideBytes(t *testing.T) {
	for _, c := range []struct {
		name, text string
		max        int
	}{
		{"ascii", "HEAD " + strings.Repeat("x", 100_000) + " TAIL", 1024},
		{"2-byte", "HEAD " + strings.Repeat("é", 50_000) + " TAIL", 1024},
		{"3-byte", "HEAD " + strings.Repeat("€", 50_000) + " TAIL", 1025},
		{"4-byte", "HEAD " + strings.Repeat("😀", 50_000) + " TAIL", 1027},
		{"just over", strings.Repeat("y", 1025), 1024},
	} {
		for shift := 0; shift < 4; shift++ {
			text := strings.Repeat("a", shift) + c.text
			got, n := ElideBytes(text, c.max)
			marker := fmt.Sprintf("\n[... %d bytes elided ...]\n", n)
			i := strings.Index(got, marker)
			if len(got) > c.max || !utf8.ValidString(got) || n <= 0 || i < 0 {
				t.Fatalf("%s+%d: %d bytes (max %d), %d elided, valid %v: %.80q", c.name, shift, len(got), c.max, n, utf8.ValidString(got), got)
			}
			head, tail := got[:i], got[i+len(marker):]
			if !strings.HasPrefix(text, head) || !strings.HasSuffix(text, tail) || len(head)+n+len(tail) != len(text) {
				t.Errorf("%s+%d: head %d + elided %d + tail %d bytes != %d", c.name, shift, len(head), n, len(tail), len(text))
			}
			if len(head) < c.max/3 || len(tail) < c.max/3 {
				t.Errorf("%s+%d: head %d, tail %d bytes of %d", c.name, shift, len(head), len(tail), c.max)
			}
		}
	}
	if got, n := ElideBytes("short", 1024); got != "short" || n != 0 {
		t.Errorf("a short text: %q, %d", got, n)
	}
	if got, n := ElideBytes(strings.Repeat("z", 1024), 1024); n != 0 || len(got) != 1024 {
		t.Errorf("a text of exactly the bound: %d bytes, %d elided", len(got), n)
	}
}
