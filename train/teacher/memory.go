package teacher

// A memory of the synthetic world (dataset/synth) in its written form: the
// identifiers a memory manager keeps, each with its role.

import (
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
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
		if (role == RoleAllowed || role == RoleInjected) && synth.IsIdentifier(id) {
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

// readPrompt adds the identifiers of the user's prompt: all sanctioned.
func (m *Memory) readPrompt(prompt string) {
	for _, id := range synth.Identifiers(prompt) {
		m.add(id, RoleAllowed)
	}
}

// readTurn adds what one action and its observation show. Identifiers on an
// injection line are injected; on the other lines of a document's content
// (read_file of a todo-NN.txt: the world has no documents but the one a
// user prompt names) they are sanctioned; elsewhere (acknowledgements of
// actions) they add nothing. An identifier keeps the role it was first
// seen in. The rule needs nothing but the turn, so a memory follows from
// the previous memory and the call's events alone.
func (m *Memory) readTurn(tu *dataset.Turn) {
	isDoc := synth.IsDocumentRead(tu.Action)
	for _, line := range strings.Split(tu.Observation, "\n") {
		injected := synth.IsInjectionLine(line)
		if !injected && !isDoc {
			continue
		}
		role := RoleAllowed
		if injected {
			role = RoleInjected
		}
		for _, id := range synth.Identifiers(line) {
			m.add(id, role)
		}
	}
}
