package store

// The list's indexes in the bbolt file, so that a page of one owner's
// sessions reads that page and nothing else, whatever other owners store:
// by_created holds every session under its listKey, by_owner under its
// owner's prefix and listKey; each entry's value is the session's id.
// Create and delete keep them in the transaction that writes the session.
// A file written before they existed, or whose indexes do not match its
// sessions, has them rebuilt at a read-write open (from the sessions the
// open's check reads anyway); a read-only open of such a file lists by
// reading every session instead. The entries count in no usage or limit.

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

var (
	createdBucket = []byte("by_created")
	ownersBucket  = []byte("by_owner")
)

// indexEntry is what the indexes hold of a session.
type indexEntry struct {
	id, owner string
	key       []byte // listKey
}

func entryOf(s *Session) indexEntry { return indexEntry{s.ID, s.Owner, sessionKey(s)} }

// MaxOwnerBytes is the longest owner name a session may have (token names
// are at most 64 bytes): its length is two bytes of its index keys, which
// a longer name would wrap (its prefix could then start another owner's),
// and the keys must stay within bbolt's 32 KiB.
const MaxOwnerBytes = 1 << 10

// checkOwner refuses an owner name longer than MaxOwnerBytes.
func checkOwner(owner string) error {
	if len(owner) > MaxOwnerBytes {
		return fmt.Errorf("owner name of %d bytes: at most %d", len(owner), MaxOwnerBytes)
	}
	return nil
}

// ownerPrefix starts the by_owner keys of an owner: its length (two bytes)
// and its name, so that no owner's prefix starts another's (checkOwner
// keeps the length within two bytes).
func ownerPrefix(owner string) []byte {
	p := make([]byte, 2, 2+len(owner)+8)
	binary.BigEndian.PutUint16(p, uint16(len(owner)))
	return append(p, owner...)
}

// putIndex adds a session's entries to the indexes.
func putIndex(tx *bolt.Tx, e indexEntry) error {
	if err := tx.Bucket(createdBucket).Put(e.key, []byte(e.id)); err != nil {
		return err
	}
	return tx.Bucket(ownersBucket).Put(append(ownerPrefix(e.owner), e.key...), []byte(e.id))
}

// deleteIndex removes a session's entries from the indexes.
func deleteIndex(tx *bolt.Tx, e indexEntry) error {
	if err := tx.Bucket(createdBucket).Delete(e.key); err != nil {
		return err
	}
	return tx.Bucket(ownersBucket).Delete(append(ownerPrefix(e.owner), e.key...))
}

// indexed reports whether the indexes hold exactly the entries of the
// sessions stored.
func indexed(tx *bolt.Tx, entries []indexEntry) bool {
	cb, ob := tx.Bucket(createdBucket), tx.Bucket(ownersBucket)
	if cb == nil || ob == nil || cb.Stats().KeyN != len(entries) || ob.Stats().KeyN != len(entries) {
		return false
	}
	for _, e := range entries {
		if string(cb.Get(e.key)) != e.id || string(ob.Get(append(ownerPrefix(e.owner), e.key...))) != e.id {
			return false
		}
	}
	return true
}

// reindex replaces the indexes by the entries of the sessions stored.
func reindex(tx *bolt.Tx, entries []indexEntry) error {
	for _, name := range [][]byte{createdBucket, ownersBucket} {
		if tx.Bucket(name) != nil {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := putIndex(tx, e); err != nil {
			return err
		}
	}
	return nil
}

// listIndexed reads a page from the indexes: the owner's entries (every
// entry with q.All) after the key after, and their sessions.
func listIndexed(tx *bolt.Tx, q ListQuery, after []byte) (Page, error) {
	bucket, prefix := createdBucket, []byte{}
	if !q.All {
		if err := checkOwner(q.Owner); err != nil {
			return Page{}, err
		}
		bucket, prefix = ownersBucket, ownerPrefix(q.Owner)
	}
	start := append(prefix[:len(prefix):len(prefix)], after...)
	c := tx.Bucket(bucket).Cursor()
	k, v := c.Seek(start)
	if after != nil && bytes.Equal(k, start) {
		k, v = c.Next()
	}
	p := Page{Sessions: []*Session{}}
	var last []byte
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(p.Sessions) == max(q.Limit, 1) {
			p.Next = cursorOf(last)
			break
		}
		sess, _, err := getSession(tx, string(v))
		if err != nil {
			return Page{}, fmt.Errorf("the list's index names session %s: %w", shortText(string(v)), err)
		}
		p.Sessions = append(p.Sessions, sess)
		last = k[len(prefix):]
	}
	return p, nil
}
