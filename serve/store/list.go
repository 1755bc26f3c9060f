package store

// Pages of sessions: oldest first, ties by id. A cursor names the last
// session of a page by its creation time and id, so a page starts right
// after it whatever was created or deleted meanwhile.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"slices"
	"time"
)

// ErrBadCursor is a cursor that no page of sessions gave.
var ErrBadCursor = errors.New("not a cursor of this list (give the next_cursor of the previous page)")

// listKey orders sessions by creation time, then id: the time in
// nanoseconds since 1970 (big-endian, offset so that earlier times sort
// first, before 1970 too), then the id.
func listKey(created time.Time, id string) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(created.UnixNano())^(1<<63))
	return append(k, id...)
}

// sessionKey is a session's listKey.
func sessionKey(s *Session) []byte { return listKey(s.CreatedAt, s.ID) }

// cursorOf is the cursor that lists after key.
func cursorOf(key []byte) string { return base64.RawURLEncoding.EncodeToString(key) }

// parseCursor returns the key a cursor lists after (nil for "": from the
// start).
func parseCursor(c string) ([]byte, error) {
	if c == "" {
		return nil, nil
	}
	k, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(k) < 8 || len(k) > 8+256 {
		return nil, ErrBadCursor
	}
	return k, nil
}

// pageOf is the page of at most limit sessions of all after the key after.
func pageOf(all []*Session, after []byte, limit int) Page {
	slices.SortFunc(all, func(a, b *Session) int { return bytes.Compare(sessionKey(a), sessionKey(b)) })
	p := Page{Sessions: []*Session{}}
	for _, s := range all {
		k := sessionKey(s)
		if after != nil && bytes.Compare(k, after) <= 0 {
			continue
		}
		if len(p.Sessions) == max(limit, 1) {
			p.Next = cursorOf(sessionKey(p.Sessions[len(p.Sessions)-1]))
			break
		}
		p.Sessions = append(p.Sessions, s)
	}
	return p
}
