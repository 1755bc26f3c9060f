package store

// Checking a sessions database before it is served, and reporting what of
// a damaged one is readable (mageguard serve --check-state DIR).

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// errEmptyFile marks a sessions.db of 0 bytes (CheckFile).
var errEmptyFile = errors.New("an empty file")

// bbolt's file format (go.etcd.io/bbolt/internal/common): a page starts
// with a 16-byte header (id, flags, count, overflow); pages 0 and 1 are
// meta pages, whose meta (after the header) is magic, version, page size,
// flags, root bucket (page, sequence), freelist page, page count (the
// high-water mark), transaction id and an FNV-64a checksum of the fields
// before it, in the machine's byte order.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	metaSize       = 64
	noFreelist     = ^uint64(0)
)

// boltMeta is a meta page's content.
type boltMeta struct {
	pageSize       uint32
	root, freelist uint64
	pages, txid    uint64
	version        uint32
	magicOK, sumOK bool
	valid          bool // magic, version and checksum right: bbolt uses it
}

func parseMeta(page []byte) boltMeta {
	var m boltMeta
	if len(page) < pageHeaderSize+metaSize {
		return m
	}
	b := page[pageHeaderSize : pageHeaderSize+metaSize]
	e := binary.NativeEndian
	m.magicOK = e.Uint32(b[0:]) == boltMagic
	m.version = e.Uint32(b[4:])
	m.pageSize = e.Uint32(b[8:])
	m.root = e.Uint64(b[16:])
	m.freelist = e.Uint64(b[32:])
	m.pages = e.Uint64(b[40:])
	m.txid = e.Uint64(b[48:])
	h := fnv.New64a()
	h.Write(b[:56])
	m.sumOK = h.Sum64() == e.Uint64(b[56:])
	m.valid = m.magicOK && m.version == boltVersion && m.sumOK
	return m
}

// CheckFile checks what bbolt trusts before it maps a sessions database
// into memory, so that opening it cannot fault: a valid meta page (bbolt
// uses the valid one of the highest transaction), a page size in
// [1 KiB, 64 KiB] and a power of two, the root and freelist pages below the
// page count it declares, and a file holding at least that many pages (a
// truncated file would fault at the first read past its end). A missing
// file is fine (a new database); an empty one is an error wrapping
// errEmptyFile.
func CheckFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	size := st.Size()
	damaged := func(format string, args ...any) error {
		return &DamageError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	if size == 0 {
		return fmt.Errorf("store: %s is %w where a sessions database was: every session it held is gone. Restore it from a backup, or give --init to start an empty database there", path, errEmptyFile)
	}
	read := func(off int64) []byte {
		buf := make([]byte, pageHeaderSize+metaSize)
		n, _ := f.ReadAt(buf, off)
		return buf[:n]
	}
	m0 := parseMeta(read(0))
	pageSize := int64(m0.pageSize)
	if !m0.valid { // bbolt then looks for the second meta page at 1 KiB, 2 KiB, …
		pageSize = 0
		for off := int64(1024); off <= 64<<10 && off < size; off *= 2 {
			if m := parseMeta(read(off)); m.valid {
				pageSize = int64(m.pageSize)
				break
			}
		}
	}
	if pageSize == 0 {
		if !m0.magicOK {
			return damaged("%d bytes with no valid bbolt meta page: not a sessions database, or both its meta pages are damaged", size)
		}
		return damaged("both meta pages fail their checksum or version")
	}
	if pageSize < 1024 || pageSize > 64<<10 || pageSize&(pageSize-1) != 0 {
		return damaged("a page size of %d bytes", pageSize)
	}
	m1 := parseMeta(read(pageSize))
	m := m0
	if !m0.valid || (m1.valid && m1.txid > m0.txid) {
		m = m1
	}
	switch {
	case m.pages < 4 || m.pages > uint64(size)/uint64(pageSize):
		return damaged("its meta page declares %d pages of %d bytes (%d bytes), the file has %d bytes: truncated", m.pages, pageSize, m.pages*uint64(pageSize), size)
	case m.root < 2 || m.root >= m.pages:
		return damaged("its root page %d is outside its %d pages", m.root, m.pages)
	case m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pages):
		return damaged("its freelist page %d is outside its %d pages", m.freelist, m.pages)
	case m.freelist != noFreelist:
		if problem := checkFreelist(f, m, pageSize); problem != "" {
			return damaged("its freelist page %d %s", m.freelist, problem)
		}
	}
	return nil
}

// checkFreelist checks the freelist page that bbolt reads when it opens a
// database for writing: its type, its pages inside the database, its
// count (0xffff: the count is the first id) within them, and every id a
// page of the database other than the meta pages. It reads one id at a
// time, so a damaged count costs no memory.
func checkFreelist(f *os.File, m boltMeta, pageSize int64) string {
	var hdr [pageHeaderSize + 8]byte
	if n, _ := f.ReadAt(hdr[:], int64(m.freelist)*pageSize); n < len(hdr) {
		return "is not in the file"
	}
	e := binary.NativeEndian
	flags, count, overflow := e.Uint16(hdr[8:]), uint64(e.Uint16(hdr[10:])), uint64(e.Uint32(hdr[12:]))
	if flags != 0x10 {
		return fmt.Sprintf("has the flags 0x%x, not a freelist's", flags)
	}
	if m.freelist+overflow+1 > m.pages {
		return fmt.Sprintf("runs over %d pages, past the database's %d", overflow+1, m.pages)
	}
	skip := uint64(0)
	if count == 0xffff {
		count, skip = e.Uint64(hdr[pageHeaderSize:]), 1
	}
	if count > ((overflow+1)*uint64(pageSize)-pageHeaderSize)/8-skip {
		return fmt.Sprintf("lists %d pages, more than its %d pages hold", count, overflow+1)
	}
	r := io.NewSectionReader(f, int64(m.freelist)*pageSize+pageHeaderSize+int64(8*skip), int64(8*count))
	br := bufio.NewReader(r)
	var id [8]byte
	for i := uint64(0); i < count; i++ {
		if _, err := io.ReadFull(br, id[:]); err != nil {
			return "is cut short"
		}
		if p := e.Uint64(id[:]); p < 2 || p >= m.pages {
			return fmt.Sprintf("lists page %d, outside the database's %d", p, m.pages)
		}
	}
	return ""
}

// StateReport is what a check of a sessions database found.
type StateReport struct {
	Path     string
	Sessions int      // sessions readable whole: the session and every one of its steps
	Steps    int      // their steps
	Bytes    int64    // their keys and values (what serve.max_state_bytes counts)
	Damaged  []string // what could not be read, each naming the session or page (the first 50)
	Problems int      // everything found damaged

	tenants map[string]Usage // the readable sessions and their bytes, per owner
	entries []indexEntry     // the readable sessions' index entries
}

func (r *StateReport) damaged(format string, args ...any) {
	r.Problems++
	if len(r.Damaged) < 50 {
		r.Damaged = append(r.Damaged, fmt.Sprintf(format, args...))
	}
}

// String is the report as --check-state prints it.
func (r *StateReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d sessions readable whole (%d steps, %d bytes)", r.Path, r.Sessions, r.Steps, r.Bytes)
	if r.Problems == 0 {
		b.WriteString("; nothing damaged\n")
		return b.String()
	}
	fmt.Fprintf(&b, "; %d problems:\n", r.Problems)
	for _, d := range r.Damaged {
		fmt.Fprintf(&b, "  %s\n", d)
	}
	if r.Problems > len(r.Damaged) {
		fmt.Fprintf(&b, "  … and %d more\n", r.Problems-len(r.Damaged))
	}
	return b.String()
}

// check reads every session and step (each session on its own, so that one
// damaged session does not hide the others), then runs bbolt's own
// consistency check when that found nothing. It marks nothing damaged: the
// report says what it found.
func (s *Bolt) check() *StateReport {
	rep := &StateReport{Path: s.path, tenants: map[string]Usage{}}
	var ids []string
	err := try(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			if tx.Bucket(sessionsBucket) == nil || tx.Bucket(stepsBucket) == nil {
				return errors.New("the sessions or steps bucket is missing")
			}
			return tx.Bucket(sessionsBucket).ForEach(func(k, _ []byte) error {
				ids = append(ids, string(k))
				return nil
			})
		})
	})
	if err != nil {
		rep.damaged("the list of sessions, after %d: %v", len(ids), problem(err))
	}
	for _, id := range ids {
		var steps int
		var size int64
		var sess *Session
		err := try(func() error {
			return s.db.View(func(tx *bolt.Tx) error {
				var err error
				sess, steps, size, err = checkSession(tx, id)
				return err
			})
		})
		if err != nil {
			rep.damaged("session %q: %v", shortText(id), problem(err))
			continue
		}
		rep.Sessions++
		rep.Steps += steps
		rep.Bytes += size
		u := rep.tenants[sess.Owner]
		rep.tenants[sess.Owner] = Usage{Sessions: u.Sessions + 1, Bytes: u.Bytes + size}
		rep.entries = append(rep.entries, entryOf(sess))
	}
	if rep.Problems > 0 {
		return rep
	}
	err = try(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				rep.damaged("bbolt's consistency check: %v", err)
			}
			return nil
		})
	})
	if err != nil {
		rep.damaged("bbolt's consistency check: %v", problem(err))
	}
	return rep
}

// problem is an error as a report line shows it.
func problem(err error) string {
	var d *DamageError
	if errors.As(err, &d) {
		return d.Problem
	}
	return err.Error()
}

// checkSession reads a session and its steps: the session decodes, with
// its id; its steps are keyed 0 … step_count−1 and each decodes with its
// index. It returns the session, its steps and the bytes of both.
func checkSession(tx *bolt.Tx, id string) (*Session, int, int64, error) {
	sess, size, err := getSession(tx, id)
	if err != nil {
		return nil, 0, 0, err
	}
	if sess.ID != id {
		return nil, 0, 0, fmt.Errorf("stored under another id (%q)", shortText(sess.ID))
	}
	b := stepsOf(tx, id)
	if b == nil {
		return nil, 0, 0, errors.New("no bucket of steps")
	}
	total, n := int64(size), 0
	err = b.ForEach(func(k, v []byte) error {
		var st Step
		if len(k) != 8 || binary.BigEndian.Uint64(k) != uint64(n) {
			return fmt.Errorf("step %d has the key %x", n, k)
		}
		if err := json.Unmarshal(v, &st); err != nil || st.Step != n {
			return fmt.Errorf("step %d does not decode (%v)", n, err)
		}
		n++
		total += int64(len(k) + len(v))
		return nil
	})
	if err != nil {
		return nil, 0, 0, err
	}
	if n != sess.StepCount {
		return nil, 0, 0, fmt.Errorf("%d steps stored, step_count %d", n, sess.StepCount)
	}
	return sess, n, total, nil
}

// CheckState reports what of DIR/sessions.db is readable, without changing
// it (the database is opened read-only: a server running on it makes this
// wait lockWait, then fail).
func CheckState(dir string, lockWait time.Duration) (*StateReport, error) {
	path := filepath.Join(dir, DBFile)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := CheckFile(path); err != nil {
		rep := &StateReport{Path: path}
		rep.damaged("%s", problem(err))
		return rep, nil
	}
	s := &Bolt{path: path}
	var err error
	s.db, err = openBolt(path, bolt.Options{Timeout: lockWait, ReadOnly: true})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: %s is locked by another process (a server running on it?)", path)
	}
	if err != nil {
		rep := &StateReport{Path: path}
		rep.damaged("opening it: %s", problem(err))
		return rep, nil
	}
	defer s.Close()
	return s.check(), nil
}

// shortText is untrusted text as an error message quotes it: at most 64
// bytes of it, valid UTF-8, with "…" when it was cut.
func shortText(s string) string { return strictjson.ShortKey(s) }
