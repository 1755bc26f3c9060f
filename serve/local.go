package serve

// Sessions driven in-process: a front end other than the HTTP handlers
// (mageguard mcp's gateway) creates, assesses and resumes sessions through
// these, with the same checks, batching and storage as the API's routes,
// and their refusals as *APIError. The caller is trusted: there is no
// owner check here; but Resume, an operator's act, takes the principal
// that resumes and refuses any but an operator, as the route does.

import (
	"context"
	"math"
	"time"

	"github.com/mageguard/mageguard/rollout/prompt"
)

// CreateSession stores a new session owned by owner for req and returns
// its id, as POST /v1/sessions does.
func (s *Server) CreateSession(owner string, req *CreateRequest) (string, error) {
	id, err := newID()
	if err != nil {
		return "", err
	}
	tools := req.Tools
	if tools == nil {
		tools = []Tool{}
	}
	now := s.now().UTC()
	sess := &Session{ID: id, Owner: owner, UserPrompt: req.UserPrompt, Tools: tools, CreatedAt: now, UpdatedAt: now,
		Status: StatusActive, Resumes: []time.Time{}}
	if err := s.store.Create(sess); err != nil {
		return "", storeError(err)
	}
	s.metrics.sessionCreated()
	return id, nil
}

// Assess runs req as the next step of session id, as POST
// /v1/sessions/{id}/assess does: under the session's claim (409
// session_busy while another request of it is in progress), with the
// stored answer for a retried step index, and the batcher's decision,
// stored before it returns, otherwise. ctx ending abandons a step not yet
// taken into a batch. An observation longer than serve.max_body_bytes (which
// bounds the route's whole body) is cut to its head and tail around a
// marker (prompt.ElideBytes) before the guard and the store see it.
func (s *Server) Assess(ctx context.Context, id string, req *AssessRequest) (*AssessResponse, error) {
	arrived := s.now()
	if req.Observation != nil {
		if obs, n := prompt.ElideBytes(*req.Observation, int(min(s.cfg.MaxBodyBytes, math.MaxInt32))); n > 0 {
			cut := *req
			cut.Observation = &obs
			req = &cut
		}
	}
	if err := s.claims.claim(id); err != nil {
		return nil, err
	}
	defer s.claims.release(id)
	sess, err := s.store.Get(id)
	if err != nil {
		return nil, storeError(err)
	}
	return s.assessStep(ctx, id, sess, req, arrived)
}

// Resume sets a blocked session active again on behalf of by, as POST
// /v1/sessions/{id}/resume does: 403 operator_only unless by is an
// operator (an agent may not resume a session, its own included), 409
// not_blocked when it is not blocked.
func (s *Server) Resume(by Principal, id string) error {
	if err := by.mayResume(); err != nil {
		return err
	}
	if err := s.claims.claim(id); err != nil {
		return err
	}
	defer s.claims.release(id)
	sess, err := s.store.Get(id)
	if err != nil {
		return storeError(err)
	}
	return s.resumeSession(id, sess)
}

// RecordResult records what step n of session id's action returned
// (Step.Result), as POST /v1/sessions/{id}/steps/{n}/result does; the
// gateway records every forwarded call's result with it, so that a
// session's last result is kept too. A result longer than
// serve.max_body_bytes is cut as Assess cuts an observation. It takes no
// claim: it changes nothing the guard reads.
func (s *Server) RecordResult(id string, n int, result string) error {
	result, _ = prompt.ElideBytes(result, int(min(s.cfg.MaxBodyBytes, math.MaxInt32)))
	if err := s.store.SetResult(id, n, result); err != nil {
		return storeError(err)
	}
	return nil
}

// MaxBodyBytes is serve.max_body_bytes: the largest request body the API
// reads, and the bound an in-process front end puts on what it takes in
// (mageguard mcp: a client's message; a tool result as an observation).
func (s *Server) MaxBodyBytes() int64 { return s.cfg.MaxBodyBytes }
