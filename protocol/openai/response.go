package openai

import (
	"errors"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// errNoChoice reports an answer without choices[0].message, such as an error body.
var errNoChoice = errors.New("openai: response has no choices[0].message")

// DecodeResponse reads a non-streaming chat.completion JSON: choices[0].message and
// usage. Usage is returned even when the message is missing.
func DecodeResponse(body []byte) (protocol.Message, protocol.Usage, error) {
	if err := jsontext.Validate(body); err != nil {
		return protocol.Message{}, protocol.Usage{}, err
	}
	return decodeValid(body)
}

// decodeValid is DecodeResponse on a body already validated.
func decodeValid(body []byte) (protocol.Message, protocol.Usage, error) {
	root := gjson.ParseBytes(body)
	var choices, usage gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			choices = v
		case "usage":
			usage = v
		}
		return true
	})
	u := usageKeys.Read(usage)
	var msg gjson.Result
	if choices.IsArray() {
		choices.ForEach(func(_, c gjson.Result) bool {
			if c.IsObject() {
				msg = jsontext.ObjectKey(c, "message")
			}
			return false // choices[0] only
		})
	}
	if !msg.IsObject() {
		return protocol.Message{}, u, errNoChoice
	}
	f := readFields(msg)
	m := f.message()
	var parts int
	m.Content, parts = contentText(f.content, nil)
	f.extras(&m, parts)
	if m.Role == "" {
		m.Role = "assistant"
	}
	return m, u, nil
}

// usageKeys names the token counts of a usage object.
var usageKeys = protocol.UsageKeys{Input: "prompt_tokens", Output: "completion_tokens"}
