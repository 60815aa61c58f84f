package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
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
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(),
		strings.Contains(err.Error(), "timeout awaiting response headers"):
		return &Error{Status: http.StatusGatewayTimeout, Type: "upstream_timeout",
			Msg: "upstream " + target + " did not answer in time", Err: err}
	default:
		return &Error{Status: http.StatusBadGateway, Type: "upstream_unreachable",
			Msg: "upstream " + target + " is unreachable", Err: err}
	}
}

// writeError renders e in the OpenAI error envelope, which every OpenAI-compatible SDK
// surfaces with its message.
func writeError(ctx *fasthttp.RequestCtx, e *Error) {
	body := []byte(`{"error":{"message":"","type":"","param":null,"code":null}}`)
	body, _ = sjson.SetBytes(body, "error.message", e.Error())
	body, _ = sjson.SetBytes(body, "error.type", e.Type)
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// serverError is fasthttp's ErrorHandler: failures before the handler runs (too large,
// malformed HTTP) still get an envelope that names the problem.
func (s *Server) serverError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Msg: fmt.Sprintf("request body is larger than server.max_body_bytes (%d bytes)", s.maxBody)})
		return
	}
	writeError(ctx, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Msg: "malformed HTTP request", Err: err})
}
