package store

// Memory keeps sessions as Bolt does, as JSON, in maps: the same answers,
// errors, limits and byte counts, without a file (handler tests, and
// anything that needs no persistence). Its List decodes every session:
// it is not meant for many.

import (
	"encoding/json"
	"fmt"
	"time"
)

// Memory is a Store in memory. Its zero value is not ready: use NewMemory.
type Memory struct {
	counts                     // its mu guards the maps too
	sessions map[string][]byte // id → the session as JSON
	steps    map[string][][]byte
}

// NewMemory returns an empty store in memory.
func NewMemory() *Memory {
	return &Memory{sessions: map[string][]byte{}, steps: map[string][][]byte{}}
}

// Create stores a new session; its id must be new. Past a limit it
// returns a *LimitError. An owner name longer than MaxOwnerBytes is refused.
func (m *Memory) Create(sess *Session) error {
	if err := checkOwner(sess.Owner); err != nil {
		return err
	}
	data, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	size := int64(len(sess.ID) + len(data))
	return m.write(func(u *tally) error {
		if err := u.admit(m.limits, sess.Owner, 1, size); err != nil {
			return err
		}
		if m.sessions[sess.ID] != nil {
			return fmt.Errorf("session id %s exists", sess.ID)
		}
		m.sessions[sess.ID], m.steps[sess.ID] = data, [][]byte{}
		u.add(sess.Owner, 1, size)
		return nil
	})
}

// get decodes a session and returns the bytes its entry takes; m.mu is
// held.
func (m *Memory) get(id string) (*Session, int, error) {
	v := m.sessions[id]
	if v == nil {
		return nil, 0, ErrNotFound
	}
	sess := new(Session)
	if err := json.Unmarshal(v, sess); err != nil {
		return nil, 0, fmt.Errorf("session %s: %w", id, err)
	}
	return sess, len(id) + len(v), nil
}

// Get returns a session (ErrNotFound when there is none).
func (m *Memory) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, _, err := m.get(id)
	return sess, err
}

// GetWithSteps returns a session and its steps in order.
func (m *Memory) GetWithSteps(id string) (*Session, []Step, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, _, err := m.get(id)
	if err != nil {
		return nil, nil, err
	}
	steps := make([]Step, len(m.steps[id]))
	for i, v := range m.steps[id] {
		if err := json.Unmarshal(v, &steps[i]); err != nil {
			return nil, nil, fmt.Errorf("session %s step %d: %w", id, i, err)
		}
	}
	return sess, steps, nil
}

// GetStep returns step n of a session.
func (m *Memory) GetStep(id string, n int) (*Step, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, _, err := m.get(id); err != nil {
		return nil, err
	}
	if n < 0 || n >= len(m.steps[id]) {
		return nil, fmt.Errorf("session %s step %d: %w", id, n, ErrNoStep)
	}
	st := new(Step)
	return st, json.Unmarshal(m.steps[id][n], st)
}

// CommitSteps stores the steps of a batch as Bolt.CommitSteps does.
func (m *Memory) CommitSteps(cs []Commit) ([]error, error) {
	errs := make([]error, len(cs))
	err := m.write(func(u *tally) error {
		return commitSteps(cs, errs, m.limits, u, m.get, func(id string, _ int, step, entry []byte) error {
			m.steps[id] = append(m.steps[id], step)
			m.sessions[id] = entry
			return nil
		})
	})
	return errs, err
}

// Resume sets a blocked session active again and records when.
func (m *Memory) Resume(id string, at time.Time) (*Session, error) {
	var sess *Session
	err := m.write(func(u *tally) error {
		var err error
		var old int
		if sess, old, err = m.get(id); err != nil {
			return err
		}
		if err := resume(sess, at); err != nil {
			return err
		}
		return m.put(u, sess, old)
	})
	return sess, err
}

// put stores sess, whose entry took old bytes, counting the difference.
func (m *Memory) put(u *tally, sess *Session, old int) error {
	data, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	m.sessions[sess.ID] = data
	u.add(sess.Owner, 0, int64(len(sess.ID)+len(data)-old))
	return nil
}

// SetLabel sets an operator's label on step n of a session.
func (m *Memory) SetLabel(id string, n int, l StepLabel) error {
	return m.editStep(id, n, false, withLabel(l))
}

// SetResult records what step n's action returned.
func (m *Memory) SetResult(id string, n int, result string) error {
	return m.editStep(id, n, true, withResult(result))
}

// editStep rewrites step n of a session as Bolt.editStep does.
func (m *Memory) editStep(id string, n int, limit bool, edit func(*Step)) error {
	return m.write(func(u *tally) error {
		sess, _, err := m.get(id)
		if err != nil {
			return err
		}
		if n < 0 || n >= len(m.steps[id]) {
			return fmt.Errorf("session %s step %d: %w", id, n, ErrNoStep)
		}
		old := m.steps[id][n]
		data, err := edited(old, edit)
		if err != nil {
			return fmt.Errorf("session %s step %d: %w", id, n, err)
		}
		grow := int64(len(data) - len(old))
		if limit {
			if err := u.admit(m.limits, sess.Owner, 0, grow); err != nil {
				return err
			}
		}
		m.steps[id][n] = data
		u.add(sess.Owner, 0, grow)
		return nil
	})
}

// Delete removes a session and its steps.
func (m *Memory) Delete(id string) error {
	return m.write(func(u *tally) error { return m.delete(u, id) })
}

// delete removes a session and its steps, taking their bytes off u.
func (m *Memory) delete(u *tally, id string) error {
	sess, size, err := m.get(id)
	if err != nil {
		return err
	}
	total := int64(size)
	for _, v := range m.steps[id] {
		total += int64(stepKeySize + len(v))
	}
	delete(m.sessions, id)
	delete(m.steps, id)
	u.add(sess.Owner, -1, -total)
	return nil
}

// Idle returns the ids of the sessions last created, stepped or resumed
// before t.
func (m *Memory) Idle(before time.Time) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, v := range m.sessions {
		var at activity
		if json.Unmarshal(v, &at) == nil && at.last().Before(before) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// DeleteIdle deletes session id if it is still idle since before, and
// reports whether it did.
func (m *Memory) DeleteIdle(id string, before time.Time) (bool, error) {
	deleted := false
	err := m.write(func(u *tally) error {
		var at activity
		if v := m.sessions[id]; v == nil || json.Unmarshal(v, &at) != nil || !at.last().Before(before) {
			return nil
		}
		deleted = true
		return m.delete(u, id)
	})
	return deleted && err == nil, err
}

// List returns a page of sessions, oldest first (ties by id).
func (m *Memory) List(q ListQuery) (Page, error) {
	after, err := parseCursor(q.Cursor)
	if err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []*Session
	for id := range m.sessions {
		sess, _, err := m.get(id)
		if err != nil {
			return Page{}, err
		}
		if q.All || sess.Owner == q.Owner {
			all = append(all, sess)
		}
	}
	return pageOf(all, after, q.Limit), nil
}

// Damaged is always nil: memory is not damaged.
func (m *Memory) Damaged() error { return nil }

// Close does nothing.
func (m *Memory) Close() error { return nil }
