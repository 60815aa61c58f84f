package registry

import (
	"net/http"

	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/protocol/gemini"
)

// Errors is an error shape: the body a protocol's SDKs surface with its message.
type Errors struct {
	Name string // for docs and test failures
	// Body is the error's JSON body (also the data of a stream's error event).
	// typ is camproxy's OpenAI-style error type (invalid_request_error …).
	Body func(status int, typ, msg string) []byte
	// Header is a header the SDKs read the error's type from ("" none), and its value.
	Header      string
	HeaderValue func(status int) string
	// Event says whether a broken text/event-stream answer may end with an
	// "event: error" whose data is Body: where the protocol defines one and its SDKs
	// raise it with its message.
	Event bool
	// BareEvent: the error event is its data line alone, with no "event: error"
	// line (a reader that takes only data: events would skip it).
	BareEvent bool
}

// OpenAIErrors: {"error":{"message","type","param","code"}}. openai-go, -python and
// -node all raise an SSE event whose data has "error", named "error" or not.
var OpenAIErrors = &Errors{Name: "openai", Event: true,
	Body: func(_ int, typ, msg string) []byte {
		b, _ := sjson.SetBytes([]byte(`{"error":{"message":"","type":"","param":null,"code":null}}`), "error.message", msg)
		b, _ = sjson.SetBytes(b, "error.type", typ)
		return b
	}}

// AnthropicErrors: {"type":"error","error":{"type","message"}}; its SDKs raise
// event: error as an API error.
var AnthropicErrors = &Errors{Name: "anthropic", Event: true,
	Body: func(status int, _, msg string) []byte {
		b, _ := sjson.SetBytes([]byte(`{"type":"error","error":{"type":"","message":""}}`), "error.message", msg)
		b, _ = sjson.SetBytes(b, "error.type", anthropicType(status))
		return b
	}}

// AWSErrors: {"message"} with x-amzn-ErrorType, as the AWS SDKs read it. No error
// event: AWS event streams are binary frames with checksums.
var AWSErrors = &Errors{Name: "aws", Header: "X-Amzn-Errortype", HeaderValue: awsType,
	Body: func(_ int, _, msg string) []byte {
		b, _ := sjson.SetBytes([]byte(`{"message":""}`), "message", msg)
		return b
	}}

// awsType is the exception name an AWS SDK maps to its error type.
func awsType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return "ValidationException"
	case http.StatusGatewayTimeout:
		return "ModelTimeoutException"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "ServiceUnavailableException"
	}
	return "InternalServerException"
}

func anthropicType(status int) string {
	switch {
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status < 500:
		return "invalid_request_error"
	case status == http.StatusGatewayTimeout:
		return "timeout_error"
	case status == http.StatusServiceUnavailable:
		return "overloaded_error" // camproxy past server.max_in_flight, or shutting down; the SDKs retry it
	}
	return "api_error"
}

// GoogleErrors: {"error":{"code","message","status"}}, as Google's APIs write it
// and @google/genai raises it (ApiError with the message and status). A broken
// alt=sse stream ends with a bare "data: {"error":…}" event, as the API itself ends
// one: @google/genai (2.32) takes only events that start with "data:" (one led by
// "event: error" would be skipped, the cut answer read as whole) and throws on a
// chunk that is an error object. The JSON-array stream gets none: an element
// appended to a cut array would not parse either way.
var GoogleErrors = &Errors{Name: "google", Event: true, BareEvent: true,
	Body: func(status int, _, msg string) []byte { return gemini.ErrorBody(status, msg) }}
