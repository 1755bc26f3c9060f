package mcpgate

import (
	"fmt"
	"io"
	"mime"
	"net/http"
)

// UpstreamClient is the HTTP client of a downstream reached at a URL
// (--upstream-url): every response body is bounded by maxBytes
// (serve.max_body_bytes) — a plain JSON response as a whole, a
// text/event-stream response per event — so that a downstream cannot make
// the gateway read without end; past the bound the read fails, and so
// does the request it answers.
func UpstreamClient(maxBytes int64) *http.Client {
	return &http.Client{Transport: &boundedTransport{next: http.DefaultTransport, max: maxBytes}}
}

type boundedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &boundedBody{rc: resp.Body, max: t.max, events: media == "text/event-stream", url: req.URL.Redacted()}
	return resp, nil
}

// boundedBody fails a read past max bytes: of the whole body, or (events)
// since the last blank line that ends a server-sent event.
type boundedBody struct {
	rc     io.ReadCloser
	max    int64
	events bool
	url    string
	n      int64 // bytes of the body, or of the event being read
	nl     bool  // events: the last byte other than \r was a newline
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if !b.events {
		b.n += int64(n)
	} else {
		for _, c := range p[:n] {
			b.n++
			switch {
			case c == '\n' && b.nl:
				b.n = 0
			case c == '\n':
				b.nl = true
			case c != '\r':
				b.nl = false
			}
			if b.n > b.max {
				break
			}
		}
	}
	if b.n > b.max {
		what := "response body"
		if b.events {
			what = "server-sent event"
		}
		return 0, fmt.Errorf("mageguard: a %s from the downstream MCP server %s is longer than %d bytes (serve.max_body_bytes)", what, b.url, b.max)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
