package testkit

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
)

// Tap is a recording reverse proxy on loopback: it keeps every request a client
// sends it (method, path with query, headers, body byte for byte) and passes it on
// to a target, whose answer it streams back unbuffered. Put between a client that
// cannot report what it sent (a CLI) and camproxy, it sees the client's bytes before
// camproxy splices its context in; the fake behind camproxy sees them after.
type Tap struct {
	*httptest.Server
	callLog[Captured] // Requests, Last
}

// NewTap starts a Tap in front of target (scheme://host:port).
func NewTap(target string) (*Tap, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	t := &Tap{callLog: newCallLog[Captured]()}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		FlushInterval: -1, // SSE goes through as it comes
	}
	t.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		t.add(Captured{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	return t, nil
}
