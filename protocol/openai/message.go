package openai

import (
	"sync/atomic"
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// segment is one text that task rules read: the string content of a system,
// developer or user message, or one text part of its array content.
type segment struct {
	msg    int    // index of the message
	part   int    // index of the part, -1 for string content
	idx    int    // raw offset of the string's opening quote
	raw    string // the raw JSON string, quotes included
	text   string // its decoded value
	msgEnd int    // raw offset right after the message object
}

// fields holds the values of the message keys we read. On duplicate keys the last
// one wins, as in the decoders upstream.
type fields struct {
	role, content, toolCalls, functionCall, toolCallID, name gjson.Result
	refusal, reasoningContent, reasoning                     gjson.Result
}

// slot is where the value of the message key goes; nil for a key not read. The
// one table of the keys both readers read.
func (f *fields) slot(key string) *gjson.Result {
	switch key {
	case "role":
		return &f.role
	case "content":
		return &f.content
	case "tool_calls":
		return &f.toolCalls
	case "function_call":
		return &f.functionCall
	case "tool_call_id":
		return &f.toolCallID
	case "name":
		return &f.name
	case "refusal":
		return &f.refusal
	case "reasoning_content":
		return &f.reasoningContent
	case "reasoning":
		return &f.reasoning
	}
	return nil
}

// readFields walks the keys of one message object once.
func readFields(obj gjson.Result) fields {
	var f fields
	if !obj.IsObject() {
		return f
	}
	obj.ForEach(func(k, v gjson.Result) bool {
		if dst := f.slot(k.Str); dst != nil {
			*dst = v
		}
		return true
	})
	return f
}

// message normalises everything but the content, which callers read with
// contentText because the request also needs the positions of its texts.
func (f *fields) message() protocol.Message { return f.messageWith(toolCalls) }

// messageWith is message with the given reader of tool_calls (tests compare the fast
// one with gjson's walk).
func (f *fields) messageWith(readCalls func(gjson.Result) []protocol.ToolCall) protocol.Message {
	m := protocol.Message{
		Role:       f.role.Str,
		ToolCallID: f.toolCallID.Str,
		Name:       f.name.Str,
		ToolCalls:  readCalls(f.toolCalls),
	}
	// Legacy function calling carries at most one call and no id.
	if m.ToolCalls == nil && f.functionCall.IsObject() {
		tc := protocol.ToolCall{Type: "function"}
		readCall(f.functionCall, functionBody, &tc)
		m.ToolCalls = []protocol.ToolCall{tc}
	}
	return m
}

// toolCalls reads an assistant's tool_calls array; nil when absent or empty.
func toolCalls(v gjson.Result) []protocol.ToolCall {
	if !v.IsArray() {
		return nil
	}
	if v.Index > 0 {
		// A value of a validated body (request or answer): walked a word at a time.
		return toolCallsFast(v.Raw)
	}
	return toolCallsGJSON(v)
}

// toolCallsGJSON is toolCalls by gjson's walk.
func toolCallsGJSON(v gjson.Result) []protocol.ToolCall {
	if !v.IsArray() {
		return nil
	}
	var calls []protocol.ToolCall
	v.ForEach(func(_, c gjson.Result) bool {
		calls = append(calls, readToolCall(c))
		return true
	})
	return calls
}

// readToolCall reads {id, type, function:{name, arguments}}.
func readToolCall(c gjson.Result) protocol.ToolCall {
	var tc protocol.ToolCall
	if !c.IsObject() {
		return protocol.ToolCall{Type: "function"}
	}
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			tc.ID = v.Str
		case "type":
			tc.Type = v.Str
		case "function":
			readCall(v, functionBody, &tc)
		case "custom":
			readCall(v, customBody, &tc)
		}
		return true
	})
	if tc.Type == "" {
		tc.Type = "function" // the only type chat completions knows
	}
	return tc
}

// callBody is what a tool call's object holds besides its name: a function's
// arguments (JSON text, read by arguments) or a custom (freeform) call's input
// (plain text).
type callBody struct {
	key  string
	text func(gjson.Result) string
}

var (
	functionBody = callBody{key: "arguments", text: arguments}
	customBody   = callBody{key: "input", text: func(v gjson.Result) string { return v.Str }}
)

// readCall reads a call's {name, <b.key>} into tc.
func readCall(obj gjson.Result, b callBody, tc *protocol.ToolCall) {
	if !obj.IsObject() {
		return
	}
	obj.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "name":
			tc.Name = v.Str
		case b.key:
			tc.Arguments = b.text(v)
		}
		return true
	})
}

// arguments is the JSON text of a call's arguments. The API sends a string; some
// clients send the object itself, whose raw text is the same JSON.
func arguments(v gjson.Result) string {
	switch v.Type {
	case gjson.String:
		return v.Str
	case gjson.JSON:
		return v.Raw
	}
	return ""
}

// contentText returns the text of a message's content: a string as is, an array
// of parts as its text parts joined with "\n" (images and audio carry no text),
// anything else as "". visit, when not nil, sees every text with its part index
// (-1 for string content); parts is the number of elements of an array content.
func contentText(c gjson.Result, visit func(part int, text gjson.Result)) (text string, parts int) {
	switch {
	case c.Type == gjson.String:
		if visit != nil {
			visit(-1, c)
		}
		return c.Str, 0
	case !c.IsArray():
		return "", 0
	}
	var (
		first  string
		joined []byte
		n      int
	)
	c.ForEach(func(_, p gjson.Result) bool {
		t, ok := textPart(p)
		if ok {
			if visit != nil {
				visit(parts, t)
			}
			// Join lazily: one text part, the usual case, costs no allocation.
			switch n {
			case 0:
				first = t.Str
			case 1:
				joined = append(append(append(joined, first...), '\n'), t.Str...)
			default:
				joined = append(append(joined, '\n'), t.Str...)
			}
			n++
		}
		parts++
		return true
	})
	if n > 1 {
		return string(joined), parts
	}
	return first, parts
}

// textPart returns the text value of a {"type":"text","text":"…"} part.
func textPart(p gjson.Result) (gjson.Result, bool) {
	if !p.IsObject() {
		return gjson.Result{}, false
	}
	var typ, text gjson.Result
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "text":
			text = v
		}
		return true
	})
	return text, typ.Str == "text" && text.Type == gjson.String
}

// isTaskRole reports whether task rules read messages of this role.
func isTaskRole(role string) bool {
	return role == "system" || role == "developer" || role == "user"
}

// element is what one element of the messages array reads as, remembered by its
// bytes (memo) since an agent resends every earlier message on every call: the
// message, the texts task rules read and where System appends were it the first
// message. Offsets count from the element's first byte. Shared: never modified.
type element struct {
	// id tells the element from every other read (elementIDs), and tasks are the tasks
	// found in it (findTask; nil while none): first, in the cache line of the message
	// that a call copies, so that findTask's look at them costs no miss.
	id    uint64
	tasks atomic.Pointer[elementTasks]
	msg   protocol.Message
	texts []segment // msg and msgEnd unset
	sys   anchor    // meaningful when sysIn
	sysIn bool      // a system or developer message whose content takes System's text
	slot  protocol.Slot
}

// memo remembers the elements of this adapter's calls (protocol.MemoBytes at most).
var memo = protocol.NewMemo[*element](protocol.MemoBytes)

// elementIDs numbers the elements read, from 1: an id is never given twice, so a
// remembered task tells the elements before it by id without keeping them alive.
var elementIDs atomic.Uint64

// readElement reads one element of a messages array: raw is the element's own copy,
// which what it returns may alias.
func readElement(raw string) *element {
	b := unsafe.Slice(unsafe.StringData(raw), len(raw)) // read only
	e := &element{id: elementIDs.Add(1)}
	var f fields
	if b[0] == '{' {
		f, _ = scanFields(b, raw, 0, nil)
	}
	e.msg = f.message()
	taskRole := isTaskRole(e.msg.Role)
	var last gjson.Result
	var parts int
	e.msg.Content, parts = contentText(f.content, func(part int, t gjson.Result) {
		if taskRole {
			e.texts = append(e.texts, segment{part: part, idx: t.Index, raw: t.Raw, text: t.Str})
		}
		last = t
	})
	f.extras(&e.msg, parts)
	e.sys, e.sysIn = contentAnchor(e.msg.Role, f.content, last, parts)
	return e
}

// Messages is the element's one message and its slot (protocol.Element).
func (e *element) Messages() ([]protocol.Message, []protocol.Slot) {
	return unsafe.Slice(&e.msg, 1), unsafe.Slice(&e.slot, 1)
}

// readMessages reads the messages array at r.arrOpen of the valid body through the
// call's memo (only the elements not seen before are read) and returns the offset
// after it; the view is set from them once the body is walked (setMessages).
func (r *Request) readMessages(body []byte, hits *protocol.Hits[*element]) int {
	return jsontext.ReadElements(body, r.arrOpen, hits, readElement)
}

// setMessages sets the messages of the view from the elements of the messages array
// (the last one, on a duplicate key) and where the System placement appends.
func (r *Request) setMessages(els []protocol.Placed[*element]) {
	// An empty array gets the system message as its only element.
	r.sys = anchor{at: r.arrOpen + 1, kind: insSystemMessage}
	if len(els) > 0 {
		p := els[0]
		r.sys = anchor{at: r.arrOpen + 1, kind: insSystemMessage, comma: true}
		if p.V.sysIn {
			r.sys = p.V.sys
			r.sys.at += p.At
		}
	}
	protocol.Collect(&r.View, nil, els)
}

// scanFields is readFields on the message object at b[i] of the valid body, reading
// only the members it needs (the others are skipped a word at a time).
func scanFields(b []byte, js string, i int, a *jsontext.Arena) (fields, int) {
	var f fields
	end := jsontext.Members(b, js, i, func(key string, v int) int {
		dst := f.slot(key)
		if dst == nil {
			return -1
		}
		var end int
		*dst, end = jsontext.ResultIn(b, js, v, a)
		return end
	})
	return f, end
}

// systemAnchor says where System appends given the first message: into its content
// when it is a system or developer message whose content can take text, else into
// a new system message in front of it.
func systemAnchor(arrOpen int, role string, content, lastText gjson.Result, parts int) anchor {
	if a, ok := contentAnchor(role, content, lastText, parts); ok {
		return a
	}
	return anchor{at: arrOpen + 1, kind: insSystemMessage, comma: true}
}

// contentAnchor is where System appends into the content of a system or developer
// message; false when the message cannot take it.
func contentAnchor(role string, content, lastText gjson.Result, parts int) (anchor, bool) {
	if role == "system" || role == "developer" {
		switch {
		case lastText.Exists():
			return anchor{at: closingQuote(lastText), kind: insText}, true
		case content.IsArray():
			// Before the ']' that closes the parts.
			return anchor{at: content.Index + len(content.Raw) - 1, kind: insPart, comma: parts > 0}, true
		}
	}
	return anchor{}, false
}

// closingQuote is the raw offset of the quote that closes a string value.
func closingQuote(s gjson.Result) int { return s.Index + len(s.Raw) - 1 }

// toolCallsFast is toolCalls on the raw text of a valid tool_calls array, walked a
// word at a time; the strings alias raw.
func toolCallsFast(raw string) []protocol.ToolCall {
	b := unsafe.Slice(unsafe.StringData(raw), len(raw)) // read only
	var calls []protocol.ToolCall
	jsontext.Elements(b, 0, func(i int) int {
		if b[i] != '{' {
			calls = append(calls, protocol.ToolCall{Type: "function"})
			return -1
		}
		var tc protocol.ToolCall
		end := jsontext.Members(b, raw, i, func(key string, v int) int {
			switch key {
			case "id":
				var end int
				tc.ID, end = stringAt(b, raw, v)
				return end
			case "type":
				var end int
				tc.Type, end = stringAt(b, raw, v)
				return end
			case "function", "custom":
				if b[v] != '{' {
					return -1
				}
				argKey := "arguments"
				if key == "custom" {
					argKey = "input" // a custom (freeform) call's text
				}
				return jsontext.Members(b, raw, v, func(key string, v int) int {
					switch key {
					case "name":
						var end int
						tc.Name, end = stringAt(b, raw, v)
						return end
					case argKey:
						r, end := jsontext.ResultAt(b, raw, v)
						if argKey == "input" {
							tc.Arguments = r.Str
						} else {
							tc.Arguments = arguments(r)
						}
						return end
					}
					return -1
				})
			}
			return -1
		})
		if tc.Type == "" {
			tc.Type = "function"
		}
		calls = append(calls, tc)
		return end
	})
	return calls
}

// stringAt is the decoded string at b[v], or "" when the value is not a string (as
// gjson's Str), and the offset after the value.
func stringAt(b []byte, js string, v int) (string, int) {
	if b[v] != '"' {
		return "", jsontext.SkipValue(b, v)
	}
	end, _ := jsontext.SkipString(b, v+1)
	return jsontext.Unquote(js[v:end]), end
}
