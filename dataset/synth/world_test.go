package synth

import (
	"encoding/json"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// TestIsIdentifierAndIsDocumentRead pins the two readings of the world's
// text that its teachers use: a whole identifier, and a read of a task's
// document.
func TestIsIdentifierAndIsDocumentRead(t *testing.T) {
	for s, want := range map[string]bool{
		"acct-bako": true, "user-zeja": true, "site-kolo": true,
		"": false, "acct-bak": false, "acct-bako,": false, "x-acct-bako": false, "acct-BAKO": false, "mail-bako": false,
	} {
		if got := IsIdentifier(s); got != want {
			t.Errorf("IsIdentifier(%q) = %v, want %v", s, got, want)
		}
	}
	for _, tc := range []struct {
		name, args string
		want       bool
	}{
		{ReadFile, `{"file":"todo-42.txt"}`, true},
		{ReadFile, `{"file":"notes.txt"}`, false},
		{ReadFile, `{"file":"todo-42.txt.bak"}`, false},
		{ReadFile, `{"file":7}`, false},
		{"send_money", `{"file":"todo-42.txt"}`, false},
	} {
		a := dataset.Action{Name: tc.name, Arguments: json.RawMessage(tc.args)}
		if got := IsDocumentRead(a); got != tc.want {
			t.Errorf("IsDocumentRead(%s %s) = %v, want %v", tc.name, tc.args, got, tc.want)
		}
	}
}
