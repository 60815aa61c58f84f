package registry

import (
	"bytes"
	"slices"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol/anthropic"
)

// Messages is Anthropic's Messages API. It owns the rest of /v1/messages (count
// tokens, batches) and any call that carries Anthropic-Version.
var Messages = &Protocol{Name: "anthropic", Explain: "anthropic", Provider: Anthropic, Example: "/v1/messages",
	Augments: pathIs("/v1/messages"),
	Owns: func(c Call) bool {
		return bytes.HasPrefix(c.Path(), []byte("/v1/messages")) || len(c.Header("Anthropic-Version")) > 0
	},
	Parse:     bodyOnly(body(anthropic.Parse)),
	ParseBody: body(anthropic.Parse),
	// A top-level "system" (Bedrock's Converse form of it is claimed before).
	Sniff: func(root gjson.Result) bool { return root.Get("system").Exists() },
	// Content blocks typed tool_use, tool_result, document, thinking, or an image
	// with a "source".
	SniffBlock: func(b gjson.Result) bool {
		typ := b.Get("type")
		return slices.Contains([]string{"tool_use", "tool_result", "document", "thinking", "redacted_thinking"}, typ.Str) ||
			typ.Str == "image" && b.Get("source").Exists()
	},
	Errors: AnthropicErrors,
}
