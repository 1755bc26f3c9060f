package serve

// Tenants: every bearer token names a principal, an agent or an operator.
// An agent sees and acts only on the sessions it created (another's is
// 404, as a session that does not exist); an operator lists, inspects,
// resumes and deletes any. Resuming a blocked session is an operator's act
// alone: an agent may not resume a session, its own included (403
// operator_only), since an agent that an injected instruction has taken
// over holds its own token. The tokens file (--tokens-file) holds each
// token's SHA-256 digest, never the token:
//
//	tokens:
//	  - {name: billing-agent, role: agent, sha256: 9f86d0…}
//	  - {name: alice, role: operator, sha256: 2c26b4…}

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mageguard/mageguard/serve/store"
)

// Roles of a principal.
const (
	RoleAgent    = "agent"    // sees and acts on the sessions it created, but resumes none
	RoleOperator = "operator" // lists, inspects, resumes and deletes any session
)

// Principal is who a request comes from: the name and role its bearer
// token has. Without authentication every request is an operator with no
// name.
type Principal struct {
	Name string
	Role string
}

// sees reports whether p may see and act on a session owned by owner.
func (p Principal) sees(owner string) bool {
	return p.Role == RoleOperator || owner == p.Name
}

// Tokens are the bearer tokens a server accepts, each naming a principal.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	p   Principal
	sum [sha256.Size]byte
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// OperatorName is the name of the single token of --token-file or
// $MAGEGUARD_TOKEN, and so the owner of the sessions created with it. In a
// tokens file only an operator may have it.
const OperatorName = "operator"

// OperatorToken is the single token of --token-file or $MAGEGUARD_TOKEN:
// one operator, named OperatorName.
func OperatorToken(token string) *Tokens {
	return &Tokens{entries: []tokenEntry{{p: Principal{Name: OperatorName, Role: RoleOperator}, sum: sha256.Sum256([]byte(token))}}}
}

// ParseTokens reads a tokens file: a YAML mapping with one key, tokens, a
// list of {name, role, sha256}; names are 1 to 64 of [A-Za-z0-9._-], roles
// agent or operator, sha256 the token's SHA-256 digest in hex. Names and
// digests are unique; an unknown key is an error, and so is an agent named
// OperatorName.
func ParseTokens(data []byte) (*Tokens, error) {
	var f struct {
		Tokens []struct {
			Name   string `yaml:"name"`
			Role   string `yaml:"role"`
			SHA256 string `yaml:"sha256"`
		} `yaml:"tokens"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("tokens file: no tokens (want tokens: [{name, role, sha256}, …])")
	}
	t := &Tokens{}
	names, sums := map[string]bool{}, map[string]bool{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("tokens file: tokens[%d]", i)
		switch {
		case !tokenName.MatchString(e.Name):
			return nil, fmt.Errorf("%s: name %q: want 1 to 64 of A-Z a-z 0-9 . _ -", where, e.Name)
		case names[e.Name]:
			return nil, fmt.Errorf("%s: name %q given twice", where, e.Name)
		case e.Role != RoleAgent && e.Role != RoleOperator:
			return nil, fmt.Errorf("%s (%s): role %q: want agent or operator", where, e.Name, e.Role)
		case e.Name == OperatorName && e.Role != RoleOperator:
			return nil, fmt.Errorf("%s: name %q is reserved for an operator: the sessions created with --token-file or $MAGEGUARD_TOKEN are owned by %q, and an agent of that name would see them; give the agent another name", where, e.Name, OperatorName)
		}
		sum, err := hex.DecodeString(e.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): sha256: want 64 hex digits (printf %%s TOKEN | sha256sum)", where, e.Name)
		}
		if sums[string(sum)] {
			return nil, fmt.Errorf("%s (%s): the same token as another entry", where, e.Name)
		}
		names[e.Name], sums[string(sum)] = true, true
		entry := tokenEntry{p: Principal{Name: e.Name, Role: e.Role}}
		copy(entry.sum[:], sum)
		t.entries = append(t.entries, entry)
	}
	return t, nil
}

// LoadTokens reads the tokens file at path (ParseTokens).
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Lookup returns the principal whose token is token. The token's digest
// is compared with every entry's, each in constant time.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	got := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(got[:], t.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return t.entries[found].p, true
}

// isAgent reports whether name is the name of an agent's token.
func (t *Tokens) isAgent(name string) bool {
	for _, e := range t.entries {
		if e.p.Name == name {
			return e.p.Role == RoleAgent
		}
	}
	return false
}

// shareKey is what serve.max_session_share counts a session's use of the
// guard under (fairshare.go): an agent's sessions together ("tenant
// NAME"), so that an agent cannot take more of the guard by spreading its
// steps over sessions; any other session (an operator's, a session without
// authentication) on its own (its id).
func (s *Server) shareKey(sess *Session) string {
	if s.tokens != nil && s.tokens.isAgent(sess.Owner) {
		return "tenant " + sess.Owner
	}
	return sess.ID
}

// BearerToken returns the token of an "Authorization: Bearer TOKEN"
// header, or "".
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(h[len(prefix):])
}

type principalKey struct{}

// withPrincipal returns ctx carrying p.
func withPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf returns the principal wrap put in a request's context.
func principalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// visible refuses (404, as for a session that does not exist) a session
// the request's principal may not see. It runs before the session is
// claimed, so another tenant's request cannot even make it busy.
func (s *Server) visible(ctx context.Context, id string) error {
	p := principalOf(ctx)
	if p.Role == RoleOperator {
		return nil
	}
	sess, err := s.store.Get(id)
	if err != nil {
		return storeError(err)
	}
	if !p.sees(sess.Owner) {
		return errNoSession
	}
	return nil
}

// errOperatorOnly answers an agent's request to resume a session.
var errOperatorOnly = &APIError{Status: 403, Code: "operator_only",
	Message: "resuming a blocked session is an operator's decision: an agent's token may not resume a session, its own included; ask an operator (a token of role operator)"}

// errLabelOperatorOnly answers an agent's request to label a step.
var errLabelOperatorOnly = &APIError{Status: 403, Code: "operator_only",
	Message: "labeling a step is an operator's review: an agent's token may not label a step, its own session's included; ask an operator (a token of role operator)"}

// mayResume refuses (403 operator_only) a principal that is not an
// operator.
func (p Principal) mayResume() error {
	if p.Role != RoleOperator {
		return errOperatorOnly
	}
	return nil
}

// SessionList is GET /v1/sessions: a page of the sessions the caller
// sees, oldest first, without their steps, and the cursor of the next
// page ("" after the last).
type SessionList struct {
	Sessions   []*Session `json:"sessions"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// The pages of GET /v1/sessions: limit sessions each, DefaultListLimit
// unless the request says, at most MaxListLimit (a page holds whole
// sessions, each up to about serve.max_body_bytes of prompt).
const (
	DefaultListLimit = 50
	MaxListLimit     = 100
)

// list answers GET /v1/sessions?limit=N&cursor=C: a page of every
// session for an operator, of an agent's own for an agent. It reads the
// page's sessions alone, whatever other tenants store.
func (s *Server) list(w http.ResponseWriter, r *http.Request) (int, error) {
	p := principalOf(r.Context())
	q := store.ListQuery{Owner: p.Name, All: p.Role == RoleOperator, Limit: DefaultListLimit}
	for key, values := range r.URL.Query() {
		switch {
		case key != "limit" && key != "cursor":
			return 0, badField(ShortText(key), "unknown_field", "not a parameter of this list (limit, cursor)")
		case len(values) > 1:
			return 0, badField(key, "duplicate_key", "given %d times", len(values))
		case key == "limit":
			n, err := strconv.Atoi(values[0])
			if err != nil || n < 1 || n > MaxListLimit {
				return 0, badField("limit", "invalid_value", "want an integer from 1 to %d", MaxListLimit)
			}
			q.Limit = n
		default:
			q.Cursor = values[0]
		}
	}
	page, err := s.store.List(q)
	if errors.Is(err, store.ErrBadCursor) {
		return 0, badField("cursor", "invalid_value", "%v", err)
	}
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, SessionList{Sessions: page.Sessions, NextCursor: page.Next})
	return 200, nil
}
