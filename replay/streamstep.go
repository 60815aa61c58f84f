package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// A light read decodes most of its lines, the steps, only to learn a turn, a time,
// a status and a usage, yet Decode would unmarshal every message of them (nested
// UnmarshalJSONs each validating their bytes again): two thirds of a stats pass.
// lightStep reads those fields by walking the line with gjson and proves on the
// way that Decode would accept the line; when it cannot prove it (a field of an
// unexpected type, a duplicate or case-folded key, escapes in an id, content
// parts), it says so and the caller runs Decode, which decides as Read does.
// FuzzRead checks the two against each other.

// lightStepFields are the JSON names of StepEvent's fields.
var lightStepFields = []string{"v", "type", "id", "episode_id", "turn", "messages", "response",
	"answer_truncated_bytes", "usage", "timing_ms", "status", "error", "at"}

var (
	lightMessageFields  = []string{"role", "content", "tool_calls", "tool_call_id", "name", "raw"}
	lightToolCallFields = []string{"id", "type", "function", "custom", "name", "arguments"}
	lightFnFields       = []string{"name", "arguments", "input"}
	lightUsageFields    = []string{"input_tokens", "output_tokens"}
	lightTimingFields   = []string{"augment", "upstream_ttfb", "total"}
)

// lightStep returns what reassembly needs of a step line and its id and episode,
// and ok when Decode would certainly decode it as a step to the same values.
func lightStep(line []byte) (s readStep, id, ep string, ok bool) {
	if !gjson.ValidBytes(line) {
		return s, "", "", false
	}
	return lightStepValid(line)
}

// lightStepValid is lightStep on a line gjson.ValidBytes accepted already: what a
// validLines source delivers.
func lightStepValid(line []byte) (s readStep, id, ep string, ok bool) {
	// Decode's json.Unmarshal validates with encoding/json's scanner, which
	// also caps nesting at 10 000; gjson's validator is the same grammar
	// (fuzzed against it) without the cap, so only a line that might nest that
	// deep pays for the second check.
	if bytes.Count(line, []byte("["))+bytes.Count(line, []byte("{")) > 9000 && !json.Valid(line) {
		return s, "", "", false
	}
	return walkStep(line, false)
}

// fullStep is what stepOf keeps of a step line that lightStep accepted, messages
// and answer included, as Decode would make it: a full read delivers most of its
// lines through it. Decode's nested json.Unmarshals scan a message's bytes five
// times over (the line's validation, a skip, the message's own validation and
// decoding, the content's again); this is one walk of the line, each string
// unquoted once (fullString). ok is false only for a line lightStep refuses.
func fullStep(line []byte) (readStep, bool) {
	s, _, _, ok := walkStep(line, true)
	return s, ok
}

// walkStep is lightStep after the validation; full decodes the messages and the
// answer too.
func walkStep(line []byte, full bool) (s readStep, id, ep string, ok bool) {
	var ev StepEvent
	var version, step bool // Decode needs both
	ok = lightObject(gjson.ParseBytes(line), lightStepFields, func(k string, v gjson.Result) bool {
		switch k {
		case "v":
			version = v.Raw == "1"
			return version
		case "type":
			step = v.Raw == `"`+TypeStep+`"`
			return step
		case "id":
			ev.ID, ok = lightPlainString(v)
			return ok
		case "episode_id":
			ev.EpisodeID, ok = lightPlainString(v)
			return ok && ev.EpisodeID != ""
		case "error":
			ev.Error, ok = lightPlainString(v)
			return ok
		case "turn":
			ev.Turn, ok = lightInt(v)
			return ok
		case "status":
			ev.Status, ok = lightInt(v)
			return ok
		case "answer_truncated_bytes":
			_, ok = lightInt(v)
			return ok
		case "at":
			return v.Type == gjson.Null || v.Type == gjson.String && ev.At.UnmarshalJSON([]byte(v.Raw)) == nil
		case "usage":
			return lightObject(v, lightUsageFields, func(k string, v gjson.Result) bool {
				n, ok := lightInt(v)
				if k == "input_tokens" {
					ev.Usage.InputTokens = int64(n)
				} else {
					ev.Usage.OutputTokens = int64(n)
				}
				return ok
			})
		case "timing_ms":
			return lightObject(v, lightTimingFields, func(k string, v gjson.Result) bool {
				if v.Type == gjson.Null {
					return true
				}
				f, err := strconv.ParseFloat(v.Raw, 64)
				if k == "augment" {
					ev.Timing.Augment = f
				}
				return v.Type == gjson.Number && err == nil
			})
		case "messages":
			if full {
				ev.Messages, ok = fullMessages(v)
				return ok
			}
			return lightArray(v, lightMessage)
		case "response":
			if full {
				var m protocol.Message
				m, ok = fullMessage(v)
				ev.Response = &m
				return ok
			}
			return lightMessage(v)
		}
		return true
	})
	if !ok || !version || !step || ev.EpisodeID == "" {
		return s, "", "", false
	}
	return stepOf(&ev), ev.ID, ev.EpisodeID, true
}

// lightObject calls fn for each known key of o (null is an empty object), and fails
// on anything encoding/json would not read the same: not an object, a key twice, a
// key with escapes, or an unknown key that case-folds to a known one (json would
// fill that field with it).
func lightObject(o gjson.Result, known []string, fn func(k string, v gjson.Result) bool) bool {
	if o.Type == gjson.Null {
		return true
	}
	if !o.IsObject() {
		return false
	}
	var seen uint32
	ok := true
	o.ForEach(func(k, v gjson.Result) bool {
		if strings.IndexByte(k.Raw, '\\') >= 0 {
			ok = false
			return false
		}
		name := k.Raw[1 : len(k.Raw)-1]
		for i, f := range known {
			if name == f {
				if seen&(1<<i) != 0 {
					ok = false
					return false
				}
				seen |= 1 << i
				ok = fn(f, v)
				return ok
			}
			if strings.EqualFold(name, f) {
				ok = false
				return false
			}
		}
		return true
	})
	return ok
}

// lightArray checks every element of a (null is empty) with fn.
func lightArray(a gjson.Result, fn func(gjson.Result) bool) bool {
	if a.Type == gjson.Null {
		return true
	}
	if !a.IsArray() {
		return false
	}
	ok := true
	a.ForEach(func(_, v gjson.Result) bool {
		ok = fn(v)
		return ok
	})
	return ok
}

// lightMessage is protocol.Message.UnmarshalJSON's acceptance, for the shapes the
// recorder writes: string fields, content a string or null (parts: not proven),
// tool calls, raw items.
func lightMessage(m gjson.Result) bool {
	if m.Type == gjson.Null {
		return false // json would call UnmarshalJSON with null: leave it to Decode
	}
	return lightObject(m, lightMessageFields, func(k string, v gjson.Result) bool {
		switch k {
		case "tool_calls":
			return lightArray(v, lightToolCall)
		case "raw":
			return v.Type == gjson.Null || v.IsArray()
		}
		return lightStringOrNull(v)
	})
}

// fullMessages decodes a messages array lightArray(lightMessage) accepts: null is
// none, [] an empty list (as json makes them).
func fullMessages(a gjson.Result) ([]protocol.Message, bool) {
	if a.Type == gjson.Null {
		return nil, true
	}
	if !a.IsArray() {
		return nil, false
	}
	msgs := []protocol.Message{}
	ok := true
	a.ForEach(func(_, v gjson.Result) bool {
		var m protocol.Message
		m, ok = fullMessage(v)
		msgs = append(msgs, m)
		return ok
	})
	return msgs, ok
}

// fullMessage decodes a message lightMessage accepts as protocol.Message's
// UnmarshalJSON does: its strings (content a string or null) unquoted here, its tool
// calls and raw items, rarer and smaller, by encoding/json itself. It checks no more
// than it needs to decode: the line was proven by lightStep.
func fullMessage(m gjson.Result) (protocol.Message, bool) {
	var msg protocol.Message
	if m.Type == gjson.Null {
		return msg, false // as lightMessage: json would call UnmarshalJSON with null
	}
	ok := lightObject(m, lightMessageFields, func(k string, v gjson.Result) bool {
		var err error
		switch k {
		case "role":
			msg.Role, err = fullString(v)
		case "content":
			msg.Content, err = fullString(v)
		case "tool_call_id":
			msg.ToolCallID, err = fullString(v)
		case "name":
			msg.Name, err = fullString(v)
		case "tool_calls":
			err = json.Unmarshal([]byte(v.Raw), &msg.ToolCalls)
		case "raw":
			err = json.Unmarshal([]byte(v.Raw), &msg.Raw)
		}
		return err == nil
	})
	return msg, ok
}

// fullString is a string field as json decodes it (null is ""). Text without
// escapes that is valid UTF-8 is the value itself, as encoding/json would leave
// it; anything else is unquoted by encoding/json.
func fullString(v gjson.Result) (string, error) {
	switch v.Type {
	case gjson.Null:
		return "", nil
	case gjson.String:
	default:
		return "", fmt.Errorf("not a string: %.20s", v.Raw)
	}
	raw := v.Raw[1 : len(v.Raw)-1]
	if strings.IndexByte(raw, '\\') < 0 && utf8.ValidString(raw) {
		return strings.Clone(raw), nil // not a view that keeps the whole line alive
	}
	var out string
	err := json.Unmarshal([]byte(v.Raw), &out)
	return out, err
}

func lightToolCall(tc gjson.Result) bool {
	if !tc.IsObject() {
		return false
	}
	return lightObject(tc, lightToolCallFields, func(k string, v gjson.Result) bool {
		switch k {
		case "function", "custom":
			return lightObject(v, lightFnFields, func(k string, v gjson.Result) bool {
				return k == "arguments" || lightStringOrNull(v)
			})
		case "arguments":
			return true // a string, or any JSON compacted
		}
		return lightStringOrNull(v)
	})
}

func lightStringOrNull(v gjson.Result) bool { return v.Type == gjson.String || v.Type == gjson.Null }

// lightPlainString is a string field's value when its raw form is the value itself
// (no escapes, valid UTF-8); null is "".
func lightPlainString(v gjson.Result) (string, bool) {
	switch {
	case v.Type == gjson.Null:
		return "", true
	case v.Type != gjson.String:
		return "", false
	}
	raw := v.Raw[1 : len(v.Raw)-1]
	if strings.IndexByte(raw, '\\') >= 0 || !utf8.ValidString(raw) {
		return "", false
	}
	return raw, true
}

// lightInt reads an int field as encoding/json does: an integer literal in range;
// null is 0.
func lightInt(v gjson.Result) (int, bool) {
	if v.Type == gjson.Null {
		return 0, true
	}
	if v.Type != gjson.Number || bytes.ContainsAny([]byte(v.Raw), ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Raw, 10, strconv.IntSize)
	return int(n), err == nil
}
