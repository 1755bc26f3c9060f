package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxResponseBytes bounds the body read from the server.
const maxResponseBytes = 32 << 20

// post sends body as JSON to the endpoint's path and decodes the answer
// into out, retrying 429, 5xx and transport errors.
func (g *Generator) post(ctx context.Context, path string, body, out any) error {
	return g.postURL(ctx, strings.TrimRight(g.cfg.Endpoint, "/")+path, body, out)
}

// postURL is post to a whole URL; a nil out reads no answer but its status.
func (g *Generator) postURL(ctx context.Context, url string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	wait := g.Backoff
	for attempt := 0; ; attempt++ {
		retryAfter, err := g.once(ctx, url, data, out)
		var re *retryable
		if err == nil || !errors.As(err, &re) || attempt >= g.cfg.RemoteRetries {
			if err != nil && attempt > 0 {
				return fmt.Errorf("%w (after %d retries)", err, attempt)
			}
			return err
		}
		d := wait
		if retryAfter >= 0 {
			d = retryAfter
		}
		d = min(d, g.MaxWait)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait *= 2
	}
}

// retryable marks an error worth retrying.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// once sends one HTTP request. It returns the server's Retry-After (-1 when
// none) with a retryable error for 429 and 5xx.
func (g *Generator) once(ctx context.Context, url string, data []byte, out any) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return -1, err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.key != "" {
		req.Header.Set("Authorization", "Bearer "+g.key)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, &retryable{fmt.Errorf("POST %s: %w", url, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return -1, &retryable{fmt.Errorf("POST %s: reading the answer: %w", url, err)}
	}
	if len(raw) > maxResponseBytes {
		return -1, fmt.Errorf("POST %s: the answer is larger than %d bytes", url, maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		err := &statusError{url: url, status: resp.Status, code: resp.StatusCode, msg: serverMessage(raw)}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return retryAfter(resp.Header.Get("Retry-After")), &retryable{err}
		}
		return -1, err
	}
	if out == nil {
		return -1, nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return -1, fmt.Errorf("POST %s: the answer is not the expected JSON: %v", url, err)
	}
	return -1, nil
}

// statusError is a server's answer other than 200 OK; msg is its message
// (serverMessage, quoted).
type statusError struct {
	url, status string
	code        int
	msg         string
}

func (e *statusError) Error() string { return fmt.Sprintf("POST %s: %s: %s", e.url, e.status, e.msg) }

// retryAfter reads a Retry-After header: seconds or an HTTP date; -1 when
// absent or unreadable.
func retryAfter(h string) time.Duration {
	if h == "" {
		return -1
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return -1
}

// serverMessage extracts the message of an error answer: OpenAI's
// {"error": {"message": …}} or vLLM's and SGLang's {"object": "error",
// "message": …}; else the body, cut short. It is quoted: it is the server's
// text, not ours.
func serverMessage(raw []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	msg := string(raw)
	if json.Unmarshal(raw, &e) == nil {
		switch {
		case e.Error != nil && e.Error.Message != "":
			msg = e.Error.Message
		case e.Message != "":
			msg = e.Message
		}
	}
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "…"
	}
	return strconv.Quote(msg)
}
