package registry

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

// Responses is OpenAI's Responses API (POST /v1/responses; its WebSocket mode is
// the proxy's, on GET of the same path).
var Responses = &Protocol{Name: "openai", Explain: "responses", Provider: OpenAI, Example: "/v1/responses",
	Augments:  pathIs("/v1/responses"),
	Parse:     bodyOnly(body(responses.Parse)),
	ParseBody: body(responses.Parse),
	// An "input" and no "messages".
	Sniff:  func(root gjson.Result) bool { return !root.Get("messages").Exists() && root.Get("input").Exists() },
	Errors: OpenAIErrors,
}

// Chat is OpenAI's Chat Completions, the API of every OpenAI-compatible server. It
// owns every call no other protocol does: its upstream gets them untouched. Its
// bodies are the plainest: a body no other protocol claims is read as one.
var Chat = &Protocol{Name: "openai", Explain: "openai", Provider: OpenAI, Example: "/v1/chat/completions",
	Augments:  pathIs("/v1/chat/completions"),
	Owns:      func(Call) bool { return true },
	Parse:     bodyOnly(body(openai.Parse)),
	ParseBody: body(openai.Parse),
	Errors:    OpenAIErrors,
}
