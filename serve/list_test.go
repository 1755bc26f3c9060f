package serve

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestListPages: GET /v1/sessions pages through the caller's sessions
// (every session for an operator), oldest first, limit at a time, each
// page after the previous one's next_cursor, the last without one; a
// limit outside 1 to MaxListLimit, a cursor no page gave, an unknown or
// repeated parameter is 400 naming it.
func TestListPages(t *testing.T) {
	ts := newTenantServer(t)
	var mine []string
	for i := range 5 {
		mine = append(mine, ts.create(fmt.Sprintf("a's task %d", i)))
		if i == 2 {
			for range 2 {
				if code, body := ts.as(agentB, "POST", "/v1/sessions", map[string]any{"user_prompt": "b's task"}); code != 201 {
					t.Fatalf("b's create: %d %s", code, body)
				}
			}
		}
	}
	pages := func(token string, limit int) (ids [][]string, owners map[string]int) {
		owners = map[string]int{}
		cursor := ""
		for range 10 {
			path := fmt.Sprintf("/v1/sessions?limit=%d", limit)
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			code, body := ts.as(token, "GET", path, nil)
			if code != 200 {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			l := decode[SessionList](t, body)
			var page []string
			for _, s := range l.Sessions {
				page = append(page, s.ID)
				owners[s.Owner]++
			}
			ids = append(ids, page)
			if cursor = l.NextCursor; cursor == "" {
				return ids, owners
			}
		}
		t.Fatal("no last page")
		return nil, nil
	}
	ids, owners := pages(agentA, 2)
	if fmt.Sprint(ids) != fmt.Sprint([][]string{mine[:2], mine[2:4], mine[4:]}) || owners["a"] != 5 || len(owners) != 1 {
		t.Errorf("a's pages %v (owners %v), want %v in pages of 2", ids, owners, mine)
	}
	if ids, owners := pages(agentB, 100); len(ids) != 1 || len(ids[0]) != 2 || owners["b"] != 2 {
		t.Errorf("b's pages %v", ids)
	}
	ids, owners = pages(operator, 3)
	if len(ids) != 3 || len(ids[2]) != 1 || owners["a"] != 5 || owners["b"] != 2 || ids[0][0] != mine[0] || ids[2][0] != mine[4] {
		t.Errorf("the operator's pages %v (owners %v)", ids, owners)
	}
	if code, body := ts.as(agentA, "GET", "/v1/sessions", nil); code != 200 || len(decode[SessionList](t, body).Sessions) != 5 || strings.Contains(string(body), "next_cursor") {
		t.Errorf("a's list with the default limit: %d %s", code, body)
	}
	for _, c := range []struct{ query, field, code string }{
		{"limit=0", "limit", "invalid_value"},
		{fmt.Sprintf("limit=%d", MaxListLimit+1), "limit", "invalid_value"},
		{"limit=x", "limit", "invalid_value"},
		{"cursor=!!", "cursor", "invalid_value"},
		{"limit=1&limit=2", "limit", "duplicate_key"},
		{"owner=b", "owner", "unknown_field"},
	} {
		code, body := ts.as(agentA, "GET", "/v1/sessions?"+c.query, nil)
		if e := decode[ErrorBody](t, body).Error; code != 400 || e.Field != c.field || e.Code != c.code {
			t.Errorf("?%s: %d %s, want 400 %s on %s", c.query, code, body, c.code, c.field)
		}
	}
}
