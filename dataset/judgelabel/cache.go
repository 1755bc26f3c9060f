package judgelabel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// maxCacheLine bounds one line of a cache file (a key and a verdict whose
// reason is at most MaxReasonChars characters).
const maxCacheLine = 64 << 10

// Cache holds the judge's verdicts by question key, in a JSONL file that
// every new verdict is appended to as it arrives: a run stopped half way
// keeps what it was told, and a rerun asks nothing twice.
type Cache struct {
	mu   sync.Mutex
	path string
	f    *os.File
	m    map[string]Verdict
}

type cacheLine struct {
	Key       string `json:"key"`
	Malicious bool   `json:"malicious"`
	Reason    string `json:"reason"`
}

// OpenCache reads the cache file path (a missing file is an empty cache)
// and opens it for appending. A last line cut short (a run killed while
// writing it) is removed from the file; any other bad line is an error
// naming the line.
func OpenCache(path string) (*Cache, error) {
	c := &Cache{path: path, m: map[string]Verdict{}}
	data, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		good, cut, err := c.load(data)
		data.Close()
		if err != nil {
			return nil, err
		}
		if cut {
			if err := os.Truncate(path, good); err != nil {
				return nil, err
			}
		}
	}
	if c.f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the cache lines; good is the length of the complete lines,
// cut whether a last line without its newline follows them.
func (c *Cache) load(r io.Reader) (good int64, cut bool, err error) {
	br := bufio.NewReader(r)
	for line := 1; ; line++ {
		b, err := readLine(br)
		if err == io.EOF {
			return good, false, nil
		}
		if errors.Is(err, errCut) {
			return good, true, nil // its question is asked again
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s:%d: %w", c.path, line, err)
		}
		good += int64(len(b))
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		obj, err := strictjson.ObjectText(b, "", "key", "malicious", "reason")
		if err != nil {
			return 0, false, fmt.Errorf("%s:%d: not a cache line: %w", c.path, line, err)
		}
		var l cacheLine
		if err := json.Unmarshal(b, &l); err != nil || len(l.Key) != 64 || obj["malicious"] == nil || obj["reason"] == nil {
			return 0, false, fmt.Errorf("%s:%d: not a cache line (want {\"key\": 64 hex digits, \"malicious\": bool, \"reason\": string})", c.path, line)
		}
		c.m[l.Key] = Verdict{Malicious: l.Malicious, Reason: l.Reason}
	}
}

var errCut = errors.New("the last line has no newline")

// readLine reads one line of at most maxCacheLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadSlice('\n')
		line = append(line, b...)
		if len(line) > maxCacheLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxCacheLine)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return nil, errCut
		default:
			return nil, err
		}
	}
}

// Get returns the verdict cached for key.
func (c *Cache) Get(key string) (Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

// Len returns the number of cached verdicts.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Put records v for key and appends it to the file.
func (c *Cache) Put(key string, v Verdict) error {
	b, err := json.Marshal(cacheLine{Key: key, Malicious: v.Malicious, Reason: v.Reason})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = v
	if _, err := c.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", c.path, err)
	}
	return nil
}

// Close closes the file.
func (c *Cache) Close() error { return c.f.Close() }
