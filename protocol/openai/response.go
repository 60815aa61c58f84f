package openai

import (
	"errors"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// errNoChoice reports an answer without choices[0].message, such as an error body.
var errNoChoice = errors.New("openai: response has no choices[0].message")

// DecodeResponse reads a non-streaming chat.completion JSON: choices[0].message and
// usage. Usage is returned even when the message is missing.
func DecodeResponse(body []byte) (protocol.Message, protocol.Usage, error) {
	m, u, ok, err := decodeAnswer(body)
	if !ok {
		return protocol.Message{}, protocol.Usage{}, jsontext.Validate(body) // the error of a body not valid
	}
	return m, u, err
}

// decodeAnswer is DecodeResponse in one pass of the word-at-a-time scanner that
// validates the body as it walks it (jsontext.ValidMembers): ok says whether body is
// valid JSON, as jsontext.Validate has it; only then are the message, usage and error
// meaningful. The root's members, choices[0], its message and usage are read, the
// rest only validated, without building gjson results for it. Only the message
// object is copied out of body (which the caller reuses): the message's strings are
// views of that copy, as they were of gjson's copy of the whole body. On duplicate
// keys the last one wins, as in gjson's walk (decodeValidGJSON, the reference the
// tests compare with).
func decodeAnswer(body []byte) (protocol.Message, protocol.Usage, bool, error) {
	var a answerScan
	if !a.scan(body) {
		return protocol.Message{}, protocol.Usage{}, false, nil
	}
	if a.msgAt < 0 || body[a.msgAt] != '{' {
		return protocol.Message{}, a.usage, true, errNoChoice
	}
	raw := string(body[a.msgAt:a.msgEnd]) // the message outlives body
	a.msg.rebase(raw, a.msgAt)
	return answer(&a.msg), a.usage, true, nil
}

// answerScan is what decodeAnswer's pass finds in a body.
type answerScan struct {
	msgAt, msgEnd int    // choices[0].message's bytes; msgAt -1 when there is none
	msg           fields // its fields, read from the body
	usage         protocol.Usage
}

// scan reads body into a, validating it: false when it is not valid JSON.
func (a *answerScan) scan(body []byte) bool {
	a.msgAt, a.msgEnd = -1, -1
	if !utf8.Valid(body) { // once for the whole body: the pieces below check its syntax
		return false
	}
	js := unsafe.String(unsafe.SliceData(body), len(body)) // read only; what is kept is rebased
	i := jsontext.SkipWS(body, 0)
	var end int
	if i < len(body) && body[i] == '{' {
		end = jsontext.ValidMembers(body, js, i, func(key string, v int) int {
			switch key {
			case "choices":
				a.msgAt, a.msgEnd, a.msg = -1, -1, fields{}
				return a.choices(body, js, v)
			case "usage":
				var end int
				a.usage, end = validUsage(body, js, v)
				return end
			}
			return jsontext.ValidValue(body, v, 1)
		})
	} else {
		end = jsontext.ValidValue(body, i, 0) // valid or not, it holds no answer
	}
	return end >= 0 && jsontext.SkipWS(body, end) == len(body)
}

// choices reads the choices value at body[v], a member of the root: the offset after
// it, -1 when it is not valid.
func (a *answerScan) choices(body []byte, js string, v int) int {
	if body[v] != '[' {
		return jsontext.ValidValue(body, v, 1)
	}
	first := true // choices[0] only
	return jsontext.ValidElements(body, v, func(c int) int {
		if !first || body[c] != '{' {
			first = false
			return jsontext.ValidValue(body, c, 2)
		}
		first = false
		return jsontext.ValidMembers(body, js, c, func(key string, v int) int {
			if key != "message" {
				return jsontext.ValidValue(body, v, 3)
			}
			a.msg = fields{}
			var end int
			if body[v] == '{' {
				end = validFields(body, js, v, &a.msg)
			} else {
				end = jsontext.ValidValue(body, v, 3)
			}
			a.msgAt, a.msgEnd = v, end
			return end
		})
	})
}

// validFields is scanFields on the message object at b[v] of a body not validated
// yet, a choice's member, validating it as it is read into f (zero): the offset after
// it, -1 when it is not valid.
func validFields(b []byte, js string, v int, f *fields) int {
	return jsontext.ValidMembers(b, js, v, func(key string, w int) int {
		dst := f.slot(key)
		if dst == nil {
			return jsontext.ValidValue(b, w, 4)
		}
		var end int
		*dst, end = jsontext.ValidResult(b, js, w, 4)
		return end
	})
}

// rebase moves the fields read from a body, whose message object started at
// offset at, to raw, that object's copy: as scanFields would have read them from
// raw. A decoded string (of a string with escapes) is a copy already.
func (f *fields) rebase(raw string, at int) {
	for _, r := range [...]*gjson.Result{&f.role, &f.content, &f.toolCalls, &f.functionCall, &f.toolCallID,
		&f.name, &f.refusal, &f.reasoningContent, &f.reasoning} {
		if r.Raw == "" {
			continue // absent
		}
		aliased := r.Type == gjson.String && len(r.Str) == len(r.Raw)-2 && unsafe.StringData(r.Str) == unsafe.StringData(r.Raw[1:])
		r.Index -= at
		r.Raw = raw[r.Index : r.Index+len(r.Raw)]
		if aliased {
			r.Str = r.Raw[1 : len(r.Raw)-1]
		}
	}
}

// validUsage is jsontext.ReadUsage of the usage value at b[v], a member of the root,
// validated as it is read: the offset after it, -1 when it is not valid.
func validUsage(b []byte, js string, v int) (protocol.Usage, int) {
	var u protocol.Usage
	if b[v] != '{' {
		return u, jsontext.ValidValue(b, v, 1)
	}
	end := jsontext.ValidMembers(b, js, v, func(key string, n int) int {
		if !usageKeys.Counts(key) {
			return jsontext.ValidValue(b, n, 2)
		}
		r, end := jsontext.ValidResult(b, js, n, 2)
		usageKeys.Set(&u, key, r)
		return end
	})
	return u, end
}

// answer is the message of an answer's fields.
func answer(f *fields) protocol.Message {
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
