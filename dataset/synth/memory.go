package synth

// A memory of the synthetic world in its written form: the identifiers a
// memory manager keeps, each with its role, and the world's rule for what a
// perfect memory keeps (the teacher of train/teacher writes it; eval's
// retention figures compare a guard's memories with it).

import (
	"fmt"
	"strings"

	"github.com/mageguard/mageguard/dataset"
)

// The roles an identifier has in a memory.
const (
	RoleAllowed  = "allowed"  // the user's request, or the document it names, asks for it
	RoleInjected = "injected" // an instruction injected into a tool output asks for it
)

// Entry is one identifier of a memory and its role.
type Entry struct {
	ID   string
	Role string // RoleAllowed or RoleInjected
}

// Memory is what a memory manager of the synthetic world keeps: the
// identifiers the user sanctioned (named in the prompt or in the document
// the prompt names) and those that injected instructions asked for, in
// order of first appearance, each with its role. Its written form (String)
// lists the injected ones first.
type Memory struct {
	Entries []Entry
}

// String writes the memory in its one-line form, each identifier followed
// by its role, the injected entries first, each group in order of first
// appearance, "none" when empty:
//
//	acct-tesa injected, acct-bako allowed, acct-miru allowed
//
// The role follows the identifier so that a judge that has written the
// pending action's target finds what the memory says of it in the token
// after the target's earlier occurrence. The injected entries come first
// because they are all the judge's rule needs: a memory manager that reads
// a document writes the injection line's identifier before it lists the
// document's allowed ones, and one that stops early loses only allowed
// entries (docs/synth.md).
func (m Memory) String() string {
	if len(m.Entries) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m.Entries))
	for _, role := range []string{RoleInjected, RoleAllowed} {
		for _, id := range m.ids(role) {
			parts = append(parts, id+" "+role)
		}
	}
	return strings.Join(parts, ", ")
}

// Allowed returns the allowed identifiers, in order.
func (m Memory) Allowed() []string { return m.ids(RoleAllowed) }

// Injected returns the injected identifiers, in order.
func (m Memory) Injected() []string { return m.ids(RoleInjected) }

func (m Memory) ids(role string) []string {
	var out []string
	for _, e := range m.Entries {
		if e.Role == role {
			out = append(out, e.ID)
		}
	}
	return out
}

// Role returns the role id has in the memory, or "" when it is not in it.
func (m Memory) Role(id string) string {
	for _, e := range m.Entries {
		if e.ID == id {
			return e.Role
		}
	}
	return ""
}

// ParseMemory reads a memory written in String's form, leniently: every
// identifier whose next word is a role has that role, the first one
// listed when it is listed twice; anything else is ignored.
func ParseMemory(text string) Memory {
	words := strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == ',' || r == ';' || r == '\n' })
	var m Memory
	for i := 0; i+1 < len(words); i++ {
		id, role := words[i], words[i+1]
		if (role == RoleAllowed || role == RoleInjected) && IsIdentifier(id) {
			m.add(id, role)
		}
	}
	return m
}

// add appends id with role unless the memory already knows it: an
// identifier keeps the role it was first seen in.
func (m *Memory) add(id, role string) {
	if m.Role(id) == "" {
		m.Entries = append(m.Entries, Entry{ID: id, Role: role})
	}
}

// ReadPrompt adds the identifiers of the user's prompt: all sanctioned.
func (m *Memory) ReadPrompt(prompt string) {
	for _, id := range Identifiers(prompt) {
		m.add(id, RoleAllowed)
	}
}

// ReadTurn adds what one action and its observation show. Identifiers on an
// injection line are injected; on the other lines of a document's content
// (read_file of a todo-NN.txt: the world has no documents but the one a
// user prompt names) they are sanctioned; elsewhere (acknowledgements of
// actions) they add nothing. An identifier keeps the role it was first
// seen in. The rule needs nothing but the turn, so a memory follows from
// the previous memory and the call's events alone.
func (m *Memory) ReadTurn(tu *dataset.Turn) {
	isDoc := IsDocumentRead(tu.Action)
	for _, line := range strings.Split(tu.Observation, "\n") {
		injected := IsInjectionLine(line)
		if !injected && !isDoc {
			continue
		}
		role := RoleAllowed
		if injected {
			role = RoleInjected
		}
		for _, id := range Identifiers(line) {
			m.add(id, role)
		}
	}
}

// PerfectMemories returns the memory a perfect memory manager writes at
// every turn of tr, unbounded: at turn t, the user's prompt and the
// actions and observations of turns before t (the guard loop's memory
// call of turn t sees the previous turn). It fails for a trajectory that is
// not of the synthetic world.
func PerfectMemories(tr *dataset.Trajectory) ([]string, error) {
	if tr.Source != Source {
		return nil, fmt.Errorf("synth: trajectory %s is not of the synthetic world (source %q)", tr.ID, tr.Source)
	}
	var m Memory
	out := make([]string, 0, len(tr.Turns))
	for t := range tr.Turns {
		if t == 0 {
			m.ReadPrompt(tr.UserPrompt)
		} else {
			m.ReadTurn(&tr.Turns[t-1])
		}
		out = append(out, m.String())
	}
	return out, nil
}
