package gemini

import (
	"strconv"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// Request is a parsed generateContent or streamGenerateContent body: the view, and
// where in the body each placement inserts.
type Request struct {
	protocol.View // Model (from the path), Stream, Messages (normalised), Task

	framing Framing
	// bodyLen is the length of the parsed body: SpliceTo refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	sys     anchor // where System inserts
	task    anchor // right after the task text (AppendToTask)
	after   anchor // where NewMessage inserts its user content
}

var _ protocol.Request = (*Request)(nil)

// anchor is one place to insert at and the JSON that goes around the escaped text.
type anchor = jsontext.Anchor

// segment is one text task rules read, with where its JSON string sits.
type segment struct {
	msg    int // index in contents, -1 for systemInstruction
	role   string
	idx    int    // raw offset of the string's opening quote
	raw    string // the raw JSON string, quotes included
	text   string
	msgEnd int // raw offset right after the content object (-1 for the system text)
	turn   int
}

// Parse reads a generateContent or streamGenerateContent body. The model and the
// answer's framing are not in the body: the path names them (ParsePath, FramingOf).
// rules are tried in order; the first that matches sets Task. A body whose task no
// rule finds parses fine with Task "".
//
// The view holds no byte of body: Parse reads a private copy, so the caller may
// reuse its buffer.
func Parse(body []byte, rules []protocol.TaskRule, model string, framing Framing) (*Request, error) {
	_, open, err := jsontext.Object(body, nil)
	if err != nil {
		return nil, err
	}
	js := string(body) // what the view's strings alias
	b := []byte(js)    // offsets are the same as body's
	r := &Request{framing: framing, bodyLen: len(body)}
	r.Model, r.Stream = model, framing.Streamed()
	var system, contents gjson.Result
	// Google's JSON mapping of protobuf accepts a field by its JSON name or its proto
	// name; on a repeated key the last one wins, as in the other adapters.
	closing := members(b, js, open, func(key string, v gjson.Result) {
		switch canon(key) {
		case "systemInstruction":
			system = v
		case "contents":
			contents = v
		}
	}) - 1
	if !contents.IsArray() {
		return nil, protocol.Missing("contents", "an array")
	}
	segs := r.readSystem(b, js, system, open, closing)
	segs = r.readContents(b, js, contents, segs)
	r.findTask(rules, body, segs, contents)
	return r, nil
}

// Parsed returns the call's view.
func (r *Request) Parsed() *protocol.View { return &r.View }

// Framing is the framing of the call's answer.
func (r *Request) Framing() Framing { return r.framing }

// members calls fn with each member of the object at b[i] as a result whose Index is
// its offset in b, and returns the offset after the object.
func members(b []byte, js string, i int, fn func(key string, v gjson.Result)) int {
	return jsontext.Members(b, js, i, func(key string, v int) int {
		res, end := jsontext.ResultAt(b, js, v)
		fn(key, res)
		return end
	})
}

// elements calls fn with each element of the array at b[i] and the offset after it.
func elements(b []byte, js string, i int, fn func(v gjson.Result, end int)) {
	jsontext.Elements(b, i, func(v int) int {
		res, end := jsontext.ResultAt(b, js, v)
		fn(res, end)
		return end
	})
}

// canon is a field's JSON name (lowerCamelCase) for its proto name (snake_case):
// Google's servers accept either, and curl examples use the proto names.
func canon(key string) string {
	switch key {
	case "system_instruction":
		return "systemInstruction"
	case "inline_data":
		return "inlineData"
	case "file_data":
		return "fileData"
	case "function_call":
		return "functionCall"
	case "function_response":
		return "functionResponse"
	case "thought_signature":
		return "thoughtSignature"
	case "mime_type":
		return "mimeType"
	case "file_uri":
		return "fileUri"
	case "display_name":
		return "displayName"
	case "usage_metadata":
		return "usageMetadata"
	case "finish_reason":
		return "finishReason"
	case "prompt_feedback":
		return "promptFeedback"
	case "block_reason":
		return "blockReason"
	}
	return key
}

// readSystem normalises systemInstruction into the first message, returns its texts
// for the task rules, and sets where System inserts: a new text part at the end of
// its parts; its parts, or the whole member, when it has none.
func (r *Request) readSystem(b []byte, js string, system gjson.Result, open, closing int) []segment {
	const part = `{"text":"`
	switch {
	case !system.Exists():
		// The first member; the body has at least "contents" after it.
		r.sys = anchor{At: open + 1, Wrap: jsontext.Wrap{Prefix: `"systemInstruction":{"parts":[` + part, Suffix: `"}]},`, Trim: true}}
		return nil
	case system.Type == gjson.String:
		// Not the API's shape (a Content), but what some clients send: extend it.
		r.Messages = append(r.Messages, protocol.Message{Role: "system", Content: system.Str})
		r.sys = anchor{At: system.Index + len(system.Raw) - 1, Wrap: jsontext.Wrap{Trim: system.Str == ""}}
		return []segment{{msg: -1, role: "system", idx: system.Index, raw: system.Raw, text: system.Str, msgEnd: -1}}
	case !system.IsObject():
		// null or a wrong type: a second member, last, so that it is the one kept.
		r.sys = anchor{At: closing, Wrap: jsontext.Wrap{Prefix: `,"systemInstruction":{"parts":[` + part, Suffix: `"}]}`, Trim: true}}
		return nil
	}
	var parts gjson.Result
	members(b, js, system.Index, func(key string, v gjson.Result) {
		if key == "parts" {
			parts = v
		}
	})
	m := protocol.Message{Role: "system"}
	var segs []segment
	if parts.IsArray() {
		n := 0
		c := readParts(b, js, parts, "system", func(t gjson.Result) {
			segs = append(segs, segment{msg: -1, role: "system", idx: t.Index, raw: t.Raw, text: t.Str, msgEnd: -1})
		})
		n = c.n
		m.Content, m.Parts, m.Raw = c.text.String(), c.parts(), c.raw
		prefix := part
		if n > 0 {
			prefix = "," + part
		}
		r.sys = anchor{At: parts.Index + len(parts.Raw) - 1, Wrap: jsontext.Wrap{Prefix: prefix, Suffix: `"}`, Trim: true}}
	} else {
		// No parts (or not an array): a parts member, last in the object.
		end := system.Index + len(system.Raw) - 1
		prefix := `,"parts":[` + part
		if jsontext.SkipWS(b, system.Index+1) == end {
			prefix = prefix[1:]
		}
		r.sys = anchor{At: end, Wrap: jsontext.Wrap{Prefix: prefix, Suffix: `"}]`, Trim: true}}
	}
	r.Messages = append(r.Messages, m)
	return segs
}

// readContents normalises contents: a user content is a user message (its function
// responses each a tool message, first), a model content an assistant message. It
// appends the texts of user contents to segs.
func (r *Request) readContents(b []byte, js string, contents gjson.Result, segs []segment) []segment {
	msg, turn := 0, 0
	var (
		calls []protocol.ToolCall // the last model content's, for its responses
		wire  []string            // their ids as sent
	)
	elements(b, js, contents.Index, func(c gjson.Result, end int) {
		var role, parts gjson.Result
		if c.IsObject() {
			members(b, js, c.Index, func(key string, v gjson.Result) {
				switch key {
				case "role":
					role = v
				case "parts":
					parts = v
				}
			})
		}
		at := msg
		visit := func(t gjson.Result) {
			segs = append(segs, segment{msg: at, role: "user", idx: t.Index, raw: t.Raw, text: t.Str, msgEnd: end, turn: turn})
		}
		switch role.Str {
		case "model":
			c := readParts(b, js, parts, "model", nil)
			r.Messages = append(r.Messages, c.modelMessage())
			calls, wire = c.calls, c.wire
			turn++
		default:
			// "user", "function" (older clients put function responses there) or none:
			// the API takes a missing role as the user's.
			if role.Str != "user" && role.Str != "" {
				visit = nil
			}
			c := readParts(b, js, parts, "user", visit)
			r.Messages = append(r.Messages, c.toolMessages(calls, wire)...)
			if c.held() || len(c.responses) == 0 {
				r.Messages = append(r.Messages, protocol.Message{Role: "user", Content: c.text.String(), Parts: c.parts(), Raw: c.raw})
			}
		}
		msg++
	})
	return segs
}

// modelMessage is a model content as the answer decoders normalise an answer, so
// that an answer and its echo in the next call hash alike.
func (c *partsAcc) modelMessage() protocol.Message {
	return protocol.Message{Role: "assistant", Content: c.text.String(), Parts: c.parts(), ToolCalls: c.calls, Raw: c.raw}
}

// findTask applies rules in order (protocol.FindTask); the first that matches sets
// r.Task and the anchors of AppendToTask and NewMessage.
func (r *Request) findTask(rules []protocol.TaskRule, body []byte, segs []segment, contents gjson.Result) {
	ps := make([]protocol.Segment, len(segs))
	for k, s := range segs {
		ps[k] = protocol.Segment{Msg: s.msg, Role: s.role, Text: s.text, Turn: s.turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return
	}
	s := segs[f.Seg]
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = anchor{At: s.idx + jsontext.QuotedOffset(s.raw, f.End)}
	const content = `{"role":"user","parts":[{"text":"`
	if s.msg >= 0 {
		r.after = anchor{At: s.msgEnd, Wrap: jsontext.Wrap{Prefix: "," + content, Suffix: `"}]}`, Trim: true}}
		return
	}
	// A task in the system instruction: the new content goes first.
	suffix := `"}]}`
	if jsontext.SkipWS([]byte(contents.Raw), 1) < len(contents.Raw)-1 {
		suffix += ","
	}
	r.after = anchor{At: contents.Index + 1, Wrap: jsontext.Wrap{Prefix: content, Suffix: suffix, Trim: true}}
}

// SpliceTo appends to dst body with text inserted per placement and returns the
// extended slice; body is not modified.
//
//   - AppendToTask: right after the task text, inside its string.
//   - System: a new text part at the end of systemInstruction's parts; a
//     systemInstruction member first in the body when there is none.
//   - NewMessage: a new user content right after the task's content.
//
// body must be the body given to Parse; any other body, an unknown placement, an
// empty text, or AppendToTask and NewMessage without a task append body unchanged.
func (r *Request) SpliceTo(dst, body []byte, p protocol.Placement, text string) []byte {
	a, ok := protocol.ByPlacement(p, r.Task != "", r.sys, r.task, r.after)
	return jsontext.Spliced(body, r.bodyLen, a, ok, text).AppendTo(dst, body)
}

// derivedID is the id a function call is recorded under: the k-th call of a model
// content (or answer) and its name. The Gemini API leaves ids out unless the model
// sets them, and clients then make their own (Gemini CLI: name, Date.now(), index)
// that they send back with the call and its response: an id made of the call's place
// alone is the one the answer and its echo in the next call share, so that they hash
// alike and the call's response finds it.
func derivedID(name string, k int) string { return "call_" + strconv.Itoa(k) + "_" + name }
