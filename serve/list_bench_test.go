package serve

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

// BenchmarkListBesideAnotherTenant: agent b's GET /v1/sessions (one
// session of its own) beside agent a's 250 sessions of 1 MB in a bbolt
// store, through the handler; ns/op and B/op are one listing's time and
// allocations (docs/serving.md#tenants).
func BenchmarkListBesideAnotherTenant(b *testing.B) {
	tokens, err := ParseTokens([]byte(fmt.Sprintf("tokens:\n  - {name: a, role: agent, sha256: %s}\n  - {name: b, role: agent, sha256: %s}\n", digest(agentA), digest(agentB))))
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(b.TempDir(), store.Options{LockWait: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	prompt := strings.Repeat("p", 1<<20)
	for i := range 250 {
		if err := st.Create(&Session{ID: fmt.Sprintf("s_a%03d", i), Owner: "a", UserPrompt: prompt, CreatedAt: time.Now(), Status: StatusActive}); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Create(&Session{ID: "s_b", Owner: "b", UserPrompt: "b's task", CreatedAt: time.Now(), Status: StatusActive}); err != nil {
		b.Fatal(err)
	}
	srv, err := New(Options{Config: DefaultConfig(), Store: st, Tokens: tokens})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	h := srv.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest("GET", "/v1/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+agentB)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"s_b"`) {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
