package prompt

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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

func TestElideObservation(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	obs := strings.Repeat("alpha beta gamma delta ", 200) + "THE END"
	text, elided := ElideObservation(tok, obs, 64)
	n := len(tok.EncodeUntrusted(obs))
	if elided != n-64 {
		t.Fatalf("elided %d, want %d", elided, n-64)
	}
	if !strings.HasPrefix(text, "alpha beta") || !strings.HasSuffix(text, "THE END") || !strings.Contains(text, "tokens elided ...]") {
		t.Fatalf("elided text %q", text)
	}
	if same, k := ElideObservation(tok, "short", 64); same != "short" || k != 0 {
		t.Fatal("a short observation was changed")
	}
}
