package openai

import (
	"errors"
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
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

// decodeValid is DecodeResponse on a body already validated, read in one pass of
// the word-at-a-time scanner (jsontext.Members): the root's members, choices[0] and
// usage are walked without building gjson results for what is skipped. Only the
// message object is copied out of body (which the caller reuses): the message's
// strings are views of that copy, as they were of gjson's copy of the whole body.
// On duplicate keys the last one wins, as in gjson's walk (decodeValidGJSON, the
// reference the tests compare with).
func decodeValid(body []byte) (protocol.Message, protocol.Usage, error) {
	js := unsafe.String(unsafe.SliceData(body), len(body)) // read only; nothing kept aliases it
	var u protocol.Usage
	msgAt, msgEnd := -1, -1
	if i := jsontext.SkipWS(body, 0); i < len(body) && body[i] == '{' {
		jsontext.Members(body, js, i, func(key string, v int) int {
			switch key {
			case "choices":
				msgAt, msgEnd = -1, -1
				if body[v] != '[' {
					return -1
				}
				first := true // choices[0] only
				return jsontext.Elements(body, v, func(c int) int {
					if !first || body[c] != '{' {
						first = false
						return -1
					}
					first = false
					return jsontext.Members(body, js, c, func(key string, v int) int {
						if key != "message" {
							return -1
						}
						msgAt, msgEnd = v, jsontext.SkipValue(body, v)
						return msgEnd
					})
				})
			case "usage":
				var end int
				u, end = jsontext.ReadUsage(body, js, v, usageKeys)
				return end
			}
			return -1
		})
	}
	if msgAt < 0 || body[msgAt] != '{' {
		return protocol.Message{}, u, errNoChoice
	}
	raw := string(body[msgAt:msgEnd]) // the message outlives body
	f, _ := scanFields(unsafe.Slice(unsafe.StringData(raw), len(raw)), raw, 0, nil)
	return answer(f), u, nil
}

// answer is the message of an answer's fields.
func answer(f fields) protocol.Message {
	m := f.message()
	var parts int
	m.Content, parts = contentText(f.content, nil)
	f.extras(&m, parts)
	if m.Role == "" {
		m.Role = "assistant"
	}
	return m
}

// usageKeys names the token counts of a usage object.
var usageKeys = protocol.UsageKeys{Input: "prompt_tokens", Output: "completion_tokens"}
