package registry

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// Bedrock is Bedrock's runtime API: Converse and InvokeModel, streamed or not. It
// owns every /model/ call; the four operations it reads are augmented.
var Bedrock = &Protocol{Name: "bedrock", Explain: "bedrock", Provider: AWSBedrock, Example: "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
	Owns: func(c Call) bool { return bytes.HasPrefix(c.RawPath(), []byte("/model/")) },
	Augments: func(c Call) bool {
		raw := c.RawPath()
		return bytes.HasPrefix(raw, []byte("/model/")) && isBedrockOp(raw)
	},
	Parse:     parseBedrock,
	ParseBody: parseBedrockBody,
	Sniff:     sniffBedrock,
	// Content blocks keyed by their kind ({"text": …}, {"toolUse": …}), not typed.
	SniffBlock: func(b gjson.Result) bool {
		return !b.Get("type").Exists() && (b.Get("text").Exists() || b.Get("toolUse").Exists() || b.Get("toolResult").Exists() ||
			b.Get("image").Exists() || b.Get("document").Exists())
	},
	Errors: AWSErrors,
}

// parseBedrock reads the operation and model id from the raw path (model ids arrive
// percent-encoded) and the body by model family.
func parseBedrock(c Call, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	model, op, err := bedrock.ParsePath(string(c.RawPath()))
	if err != nil {
		return nil, err
	}
	req, err := bedrock.Parse(op, model, body, rules)
	if errors.Is(err, bedrock.ErrUnsupported) {
		return nil, ErrPass
	}
	return req, err
}

// parseBedrockBody reads a body without its path: a Converse body unless its shape
// says which InvokeModel family it is (the proxy reads that from the path).
func parseBedrockBody(body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	if err := jsontext.Validate(body); err != nil {
		return nil, err
	}
	switch {
	case gjson.GetBytes(body, "anthropic_version").Exists():
		return bedrock.Parse(bedrock.Invoke, "anthropic.claude", body, rules)
	case gjson.GetBytes(body, "prompt").Type == gjson.String:
		return bedrock.Parse(bedrock.Invoke, "meta.llama3", body, rules)
	case gjson.GetBytes(body, "schemaVersion").Exists():
		return bedrock.Parse(bedrock.Invoke, "amazon.nova", body, rules)
	}
	return bedrock.Parse(bedrock.Converse, "", body, rules)
}

// sniffBedrock claims Converse's "inferenceConfig", "toolConfig",
// "additionalModelRequestFields" or its system ([{"text": …}]), Nova's
// "schemaVersion", a Llama "prompt", and Claude on InvokeModel (the Anthropic body
// with "anthropic_version" and no "model").
func sniffBedrock(root gjson.Result) bool {
	switch {
	case root.Get("inferenceConfig").Exists() || root.Get("toolConfig").Exists() ||
		root.Get("additionalModelRequestFields").Exists() || root.Get("schemaVersion").Exists():
		return true
	case !root.Get("messages").Exists() && root.Get("prompt").Type == gjson.String:
		return true
	case root.Get("anthropic_version").Exists():
		return true
	}
	sys := root.Get("system")
	return sys.IsArray() && sys.Get("0.type").Type == gjson.Null && sys.Get("0.text").Exists()
}

// isBedrockOp reports whether a raw /model/ path names one of the four augmented
// operations; others (count-tokens, async invoke …) are passed through.
func isBedrockOp(raw []byte) bool {
	for _, op := range [][]byte{[]byte("/converse"), []byte("/converse-stream"), []byte("/invoke"), []byte("/invoke-with-response-stream")} {
		if bytes.HasSuffix(raw, op) {
			return true
		}
	}
	return false
}
