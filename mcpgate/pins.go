package mcpgate

// Tool pinning: the definitions of a downstream's tools as first listed
// (trust on first use) or as an operator reviewed them are the approved
// ones; a definition that later differs, or a tool that appears later, is
// not approved until an operator says so (docs/mcp.md#tool-pinning).
// The pins are a plain JSON file per downstream in the state directory,
// STATE/pins/ID.json (ID: the first 16 hex digits of the downstream's
// SHA-256), written atomically under a lock file, so the gateway and
// `mageguard mcp tools` may both change it.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// PinsDir is the folder of the pin files in a state directory.
const PinsDir = "pins"

// maxPinFile bounds a pin file as read and as written (a downstream's
// listing is bounded by mcp.max_list_bytes, at most 64 MiB: its approved
// and pending definitions fit). A variable for the tests.
var maxPinFile int64 = 256 << 20

// PinFile is the JSON of one downstream's pins. A reviewed pin file that
// operators keep in their repository (--tool-pins) has the same form; only
// its Tools are read.
type PinFile struct {
	Version    int             `json:"version"`    // 1
	Downstream string          `json:"downstream"` // the downstream's command or URL
	Tools      map[string]*Pin `json:"tools"`      // the approved definitions, by tool name
	// Pending are the definitions seen that are not approved: a tool's
	// changed definition, or a tool listed after the first listing.
	Pending map[string]*Pin `json:"pending,omitempty"`
}

// Pin is one tool's definition and its hash.
type Pin struct {
	Hash       string          `json:"hash"`       // "sha256:" and the hex SHA-256 of Definition
	Definition json.RawMessage `json:"definition"` // the canonical JSON of the definition (ToolDefinition)
	Since      time.Time       `json:"since"`      // pinned (Tools), or first seen (Pending)
}

// ToolDefinition is what a pin covers of a tool: everything a client's
// model reads of it, and nothing the server may vary freely (_meta,
// icons).
type ToolDefinition struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

// definitionFields are ToolDefinition's JSON names, in order (the fields a
// change names).
var definitionFields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// PinTool returns a tool's pin: its definition in canonical JSON (object
// keys sorted, no insignificant space, numbers as written) and that
// text's SHA-256.
func PinTool(t *mcp.Tool, now time.Time) (*Pin, error) {
	def := ToolDefinition{Name: t.Name, Title: t.Title, Description: t.Description}
	for _, f := range []struct {
		v   any
		dst *json.RawMessage
	}{{t.InputSchema, &def.InputSchema}, {t.OutputSchema, &def.OutputSchema}, {t.Annotations, &def.Annotations}} {
		if isNilValue(f.v) {
			continue
		}
		raw, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		*f.dst = raw
	}
	data, err := canonicalJSON(def)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	sum := sha256.Sum256(data)
	return &Pin{Hash: "sha256:" + hex.EncodeToString(sum[:]), Definition: data, Since: now.UTC()}, nil
}

// canonicalJSON is v as JSON with every object's keys sorted, no
// insignificant space and no HTML escaping; numbers keep their text.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ChangedFields names the fields of definition b that differ from a's
// (both canonical JSON of ToolDefinition).
func ChangedFields(a, b json.RawMessage) []string {
	var ma, mb map[string]json.RawMessage
	json.Unmarshal(a, &ma)
	json.Unmarshal(b, &mb)
	var out []string
	for _, f := range definitionFields {
		if !bytes.Equal(ma[f], mb[f]) {
			out = append(out, f)
		}
	}
	return out
}

// Tool returns the pinned definition as a tool to show a client.
func (p *Pin) Tool() (*mcp.Tool, error) {
	var def ToolDefinition
	if err := json.Unmarshal(p.Definition, &def); err != nil {
		return nil, err
	}
	t := &mcp.Tool{Name: def.Name, Title: def.Title, Description: def.Description}
	if len(def.InputSchema) > 0 {
		t.InputSchema = def.InputSchema
	}
	if len(def.OutputSchema) > 0 {
		t.OutputSchema = def.OutputSchema
	}
	if len(def.Annotations) > 0 {
		t.Annotations = new(mcp.ToolAnnotations)
		if err := json.Unmarshal(def.Annotations, t.Annotations); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Pins are one downstream's pins in a state directory.
type Pins struct {
	path       string
	downstream string
	now        func() time.Time

	mu     sync.Mutex
	cached *PinFile    // the pin file as last read by Approved
	stat   os.FileInfo // the file cached was read from
}

// PinsID is the name of a downstream's pin file (without .json): the
// first 16 hex digits of the SHA-256 of its command or URL.
func PinsID(downstream string) string {
	sum := sha256.Sum256([]byte(downstream))
	return hex.EncodeToString(sum[:8])
}

// OpenPins opens the pins of downstream (its command line or URL) in the
// state directory dir. With reviewed (a pin file an operator keeps), the
// approved definitions are that file's tools, replacing the state's, and
// no tool is pinned on first use.
func OpenPins(dir, downstream, reviewed string) (*Pins, error) {
	if err := os.MkdirAll(filepath.Join(dir, PinsDir), 0o700); err != nil {
		return nil, fmt.Errorf("tool pins: %w", err)
	}
	p := &Pins{path: filepath.Join(dir, PinsDir, PinsID(downstream)+".json"), downstream: downstream, now: time.Now}
	if reviewed == "" {
		_, err := p.load()
		return p, err
	}
	rf, err := ReadPinFile(reviewed)
	if err != nil {
		return nil, err
	}
	err = p.update(func(f *PinFile) (bool, error) {
		f.Tools = rf.Tools
		for name, pend := range f.Pending {
			if pin := f.Tools[name]; pin != nil && pin.Hash == pend.Hash {
				delete(f.Pending, name)
			}
		}
		return true, nil
	})
	return p, err
}

// Path is the pin file.
func (p *Pins) Path() string { return p.path }

// Approved reports whether hash is the approved definition of tool name in
// the pin file as it is now, so that a pin revoked or replaced (by
// `mageguard mcp tools` in another process too) takes effect at a
// session's next call. The file is read again only when it changed (every
// write renames a new file into place).
func (p *Pins) Approved(name, hash string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fi, err := os.Stat(p.path)
	if err != nil {
		return false, fmt.Errorf("tool pins: %w", err)
	}
	if p.cached == nil || !os.SameFile(fi, p.stat) || !fi.ModTime().Equal(p.stat.ModTime()) || fi.Size() != p.stat.Size() {
		f, err := ReadPinFile(p.path)
		if err != nil {
			return false, err
		}
		p.cached, p.stat = f, fi
	}
	pin := p.cached.Tools[name]
	return pin != nil && pin.Hash == hash, nil
}

// ReadPinFile reads and checks a pin file: every pin's hash is its
// definition's, under the tool's own name.
func ReadPinFile(path string) (*PinFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tool pins: %w", err)
	}
	if fi.Size() > maxPinFile {
		return nil, fmt.Errorf("tool pins %s: %d bytes, more than %d", path, fi.Size(), maxPinFile)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tool pins: %w", err)
	}
	f, err := DecodePinFile(data)
	if err != nil {
		return nil, fmt.Errorf("tool pins %s: %w", path, err)
	}
	return f, nil
}

// DecodePinFile parses and checks a pin file's text.
func DecodePinFile(data []byte) (*PinFile, error) {
	var f PinFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("version %d, want 1", f.Version)
	}
	for _, set := range []struct {
		key  string
		pins map[string]*Pin
	}{{"tools", f.Tools}, {"pending", f.Pending}} {
		for _, name := range slices.Sorted(maps.Keys(set.pins)) {
			pin := set.pins[name]
			if pin == nil {
				return nil, fmt.Errorf("%s[%q]: null", set.key, name)
			}
			var def ToolDefinition
			if err := json.Unmarshal(pin.Definition, &def); err != nil {
				return nil, fmt.Errorf("%s[%q].definition: %w", set.key, name, err)
			}
			if def.Name != name {
				return nil, fmt.Errorf("%s[%q].definition: the name is %q", set.key, name, def.Name)
			}
			canon, err := canonicalJSON(def)
			if err != nil {
				return nil, fmt.Errorf("%s[%q].definition: %w", set.key, name, err)
			}
			sum := sha256.Sum256(canon)
			if want := "sha256:" + hex.EncodeToString(sum[:]); pin.Hash != want {
				return nil, fmt.Errorf("%s[%q].hash is %q, the definition's is %q", set.key, name, pin.Hash, want)
			}
			pin.Definition = canon
		}
	}
	if f.Tools == nil {
		f.Tools = map[string]*Pin{}
	}
	return &f, nil
}

// load reads the pin file (nil: none yet).
func (p *Pins) load() (*PinFile, error) {
	f, err := ReadPinFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return f, err
}

// update changes the pin file under its lock: fn gets the file (a new
// empty one when there is none: Tools nil) and reports whether to write it.
func (p *Pins) update(fn func(*PinFile) (bool, error)) error {
	unlock, err := lockFile(p.path + ".lock")
	if err != nil {
		return fmt.Errorf("tool pins: %w", err)
	}
	defer unlock()
	f, err := p.load()
	if err != nil {
		return err
	}
	if f == nil {
		f = &PinFile{Version: 1, Downstream: p.downstream}
	}
	write, err := fn(f)
	if err != nil || !write {
		return err
	}
	return writePinFile(p.path, f)
}

func writePinFile(path string, f *PinFile) error {
	if f.Tools == nil {
		f.Tools = map[string]*Pin{}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if int64(len(data)) >= maxPinFile {
		return fmt.Errorf("tool pins %s: %d bytes to write, more than %d (a pin file larger is not read back)", path, len(data)+1, maxPinFile)
	}
	return atomicfile.WriteFileMode(path, append(data, '\n'), 0o600)
}

// lockFile takes an exclusive flock on path (created), waiting for it.
func lockFile(path string) (func(), error) {
	lf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		return nil, err
	}
	return func() { lf.Close() }, nil
}

// ToolStatus is how a listed tool stands against the pins.
type ToolStatus int

const (
	ToolApproved ToolStatus = iota // its definition is the pinned one
	ToolChanged                    // pinned with another definition
	ToolNew                        // not pinned (listed after the first listing, or revoked)
)

// CheckedTool is a listed tool checked against the pins.
type CheckedTool struct {
	Tool    *mcp.Tool // as the downstream lists it
	Status  ToolStatus
	Pin     *Pin     // the definition listed
	Pinned  *Pin     // the approved definition (nil: ToolNew)
	Changed []string // the fields that differ from Pinned's (ToolNew: none)
	// Novel: this definition was not pending yet (a change not yet in the
	// audit log; Seen records it once audited).
	Novel bool
}

// Check compares a complete listing with the pins. At the downstream's
// first listing (no pin file, no reviewed file) every tool is pinned as
// listed.
func (p *Pins) Check(tools []*mcp.Tool) ([]*CheckedTool, error) {
	now := p.now()
	out := make([]*CheckedTool, len(tools))
	for i, t := range tools {
		pin, err := PinTool(t, now)
		if err != nil {
			return nil, err
		}
		out[i] = &CheckedTool{Tool: t, Pin: pin}
	}
	err := p.update(func(f *PinFile) (bool, error) {
		first := f.Tools == nil
		if first {
			f.Tools = map[string]*Pin{}
			for _, c := range out {
				f.Tools[c.Tool.Name] = c.Pin
			}
		}
		for _, c := range out {
			c.Pinned = f.Tools[c.Tool.Name]
			switch {
			case c.Pinned == nil:
				c.Status = ToolNew
			case c.Pinned.Hash != c.Pin.Hash:
				c.Status, c.Changed = ToolChanged, ChangedFields(c.Pinned.Definition, c.Pin.Definition)
			}
			if c.Status != ToolApproved {
				pend := f.Pending[c.Tool.Name]
				c.Novel = pend == nil || pend.Hash != c.Pin.Hash
			}
		}
		return first, nil
	})
	return out, err
}

// Seen records a tool's unapproved definition as pending (its change is
// audited), for an operator to approve.
func (p *Pins) Seen(c *CheckedTool) error {
	return p.update(func(f *PinFile) (bool, error) {
		if f.Pending == nil {
			f.Pending = map[string]*Pin{}
		}
		if old := f.Pending[c.Tool.Name]; old != nil && old.Hash == c.Pin.Hash {
			return false, nil
		}
		f.Pending[c.Tool.Name] = c.Pin
		return true, nil
	})
}

// PinFiles lists the pin files of a state directory.
func PinFiles(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, PinsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	return paths, nil
}

// ApprovePins approves pending definitions of the pin file at path: the
// named tools (all pending ones when names is empty). A name may carry the
// hash of the definition reviewed, TOOL@sha256:HEX (as `mcp tools show`
// prints it): when the pending definition's hash is another (the
// downstream changed it again since the review) nothing is approved. An
// approved definition is pinned; a name with nothing pending is an error.
func ApprovePins(path string, names []string, now time.Time) (approved []string, err error) {
	err = editPinFile(path, func(f *PinFile) error {
		if len(names) == 0 {
			names = slices.Sorted(maps.Keys(f.Pending))
		}
		for _, arg := range names {
			name, reviewed := arg, ""
			if i := strings.LastIndex(arg, "@sha256:"); i >= 0 {
				name, reviewed = arg[:i], arg[i+1:]
			}
			pend := f.Pending[name]
			if pend == nil {
				return fmt.Errorf("tool %q has no pending definition to approve (pending: %s)", name, strings.Join(slices.Sorted(maps.Keys(f.Pending)), ", "))
			}
			if reviewed != "" && reviewed != pend.Hash {
				return fmt.Errorf("tool %q: the pending definition is %s, not the %s reviewed (it changed since: review it again with mageguard mcp tools show %s)", name, pend.Hash, reviewed, name)
			}
			pin := *pend
			pin.Since = now.UTC()
			f.Tools[name] = &pin
			delete(f.Pending, name)
			approved = append(approved, name)
		}
		return nil
	})
	return approved, err
}

// RevokePins removes the named tools' pins from the pin file at path:
// the tools are then not approved (a call to one is refused), as a tool
// new to the listing, until a definition of theirs is approved again.
func RevokePins(path string, names []string) error {
	return editPinFile(path, func(f *PinFile) error {
		for _, name := range names {
			pin := f.Tools[name]
			if pin == nil {
				return fmt.Errorf("tool %q is not pinned", name)
			}
			delete(f.Tools, name)
		}
		return nil
	})
}

// editPinFile changes an existing pin file under its lock.
func editPinFile(path string, fn func(*PinFile) error) error {
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("tool pins: %w", err)
	}
	defer unlock()
	f, err := ReadPinFile(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writePinFile(path, f)
}
