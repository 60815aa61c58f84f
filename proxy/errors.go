package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// Error is a failure with the HTTP status and the error type the client sees. Every
// path that fails a call builds one, and writeError renders it: statuses are decided
// in one place.
type Error struct {
	Status int
	Type   string // OpenAI error type, e.g. invalid_request_error
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func badRequest(format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Msg: fmt.Sprintf(format, a...)}
}

// errClientGone marks a call whose client went away: not an upstream error, nothing to answer.
var errClientGone = errors.New("client went away")

// upstreamError maps a failed round trip to what the agent sees.
func upstreamError(target string, err error) *Error {
	var ne net.Error
	var bad *badAnswerError
	switch {
	case errors.As(err, &bad):
		return &Error{Status: http.StatusBadGateway, Type: "upstream_error", Msg: "upstream " + target + " broke HTTP/1.1", Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(),
		strings.Contains(err.Error(), "timeout awaiting response headers"):
		return &Error{Status: http.StatusGatewayTimeout, Type: "upstream_timeout",
			Msg: "upstream " + target + " did not answer in time", Err: err}
	default:
		return &Error{Status: http.StatusBadGateway, Type: "upstream_unreachable",
			Msg: "upstream " + target + " is unreachable", Err: err}
	}
}

// writeError renders e in the shape the client's SDK surfaces with its message.
func writeError(fc *fasthttp.RequestCtx, st *registry.Errors, e *Error) {
	fc.Response.Reset()
	fc.SetStatusCode(e.Status)
	fc.SetContentType("application/json")
	if st.Header != "" {
		fc.Response.Header.Set(st.Header, st.HeaderValue(e.Status))
	}
	fc.SetBody(errorBody(st, e))
}

// errorBody is e's JSON body in the shape st (also the data of a stream's error event).
func errorBody(st *registry.Errors, e *Error) []byte {
	return st.Body(e.Status, e.Type, e.Error())
}

// serverError is fasthttp's ErrorHandler: failures before the handler runs (too large,
// malformed HTTP) still get an error that names the problem — and only its class:
// fasthttp's own messages quote the request's bytes, Authorization header included.
// fasthttp closes the connection after this answer.
func (s *Server) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, styleFor(ctx), &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Msg: fmt.Sprintf("request body is larger than server.max_body_bytes (%d bytes)", s.maxBody)})
		return
	}
	status, problem := requestProblem(err)
	writeError(ctx, styleFor(ctx), &Error{Status: status, Type: "invalid_request_error", Msg: problem})
}

// framingError refuses a request whose framing two HTTP parsers could read differently.
func framingError(problem string) *Error {
	return badRequest("ambiguous request framing: %s (RFC 9112 §6); the connection is closed", problem)
}

// requestProblem names the class of a request fasthttp could not read, with the status
// it gets. Never err's text: fasthttp's parse errors quote the request's bytes. The
// classes follow fasthttp v1.74's errors; one it words differently falls to the last.
func requestProblem(err error) (int, string) {
	var small *fasthttp.ErrSmallBuffer
	var chunk fasthttp.ErrBrokenChunk
	var ne net.Error
	// What fasthttp quotes (%q) comes from the request: the class is read before it.
	msg, _, _ := strings.Cut(strings.ToLower(err.Error()), `"`)
	switch {
	case errors.As(err, &small):
		return http.StatusRequestHeaderFieldsTooLarge, "request head is too large"
	case errors.As(err, &ne) && ne.Timeout():
		return http.StatusRequestTimeout, "request not received within server.read_timeout"
	case errors.Is(err, fasthttp.ErrDuplicateContentLength), errors.Is(err, fasthttp.ErrNonNumericChars),
		strings.Contains(msg, "content-length"):
		return http.StatusBadRequest, "malformed HTTP request: invalid Content-Length"
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding), strings.Contains(msg, "transfer-encoding"):
		return http.StatusBadRequest, "malformed HTTP request: unsupported Transfer-Encoding"
	case errors.As(err, &chunk), strings.Contains(msg, "hex number"), strings.Contains(msg, "chunk"):
		return http.StatusBadRequest, "malformed HTTP request: invalid chunked body"
	case strings.Contains(msg, "first line"), strings.Contains(msg, "request method"), strings.Contains(msg, "http version"):
		return http.StatusBadRequest, "malformed HTTP request: invalid request line"
	case strings.Contains(msg, "host header"):
		return http.StatusBadRequest, "malformed HTTP request: missing or repeated Host header"
	case strings.Contains(msg, "header"):
		return http.StatusBadRequest, "malformed HTTP request: invalid header line"
	case strings.Contains(msg, "uri"):
		return http.StatusBadRequest, "malformed HTTP request: invalid request target"
	}
	return http.StatusBadRequest, "malformed HTTP request"
}
