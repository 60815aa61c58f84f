package responses

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// item holds the fields of one input or output item that the normalisation reads.
// On duplicate keys the last one wins, as in the decoders upstream.
type item struct {
	typ, role, content, callID, name, arguments, output gjson.Result
}

// readItem walks the keys of one item once.
func readItem(v gjson.Result) item {
	var it item
	if !v.IsObject() {
		return it
	}
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "type":
			it.typ = f
		case "role":
			it.role = f
		case "content":
			it.content = f
		case "call_id":
			it.callID = f
		case "name":
			it.name = f
		case "arguments":
			it.arguments = f
		case "output":
			it.output = f
		}
		return true
	})
	return it
}

// assembler turns items, in order, into chat-shaped messages: a run of consecutive
// assistant-side items becomes one assistant message. Input items and a response's
// output items go through the same code, so that an answer and its echo in the next
// call's input normalise (and hash) alike.
type assembler struct {
	msgs []protocol.Message
	run  bool // the last message is an assistant run that later assistant items join
}

// item adds one item; visit, when not nil, sees each text of a message item with its
// role (texts of user, system and developer messages are what task rules read).
func (a *assembler) item(v gjson.Result, visit func(role string, text gjson.Result)) {
	it := readItem(v)
	typ := it.typ.Str
	if typ == "" && it.role.Exists() {
		typ = "message" // an EasyInputMessage: {role, content}
	}
	switch typ {
	case "message":
		role := it.role.Str
		var each func(gjson.Result)
		if visit != nil {
			each = func(t gjson.Result) { visit(role, t) }
		}
		text := contentText(it.content, each)
		if role == "assistant" {
			a.assistantText(text)
			return
		}
		a.other(protocol.Message{Role: role, Content: text})
	case "function_call":
		a.call(protocol.ToolCall{ID: it.callID.Str, Type: "function", Name: it.name.Str, Arguments: arguments(it.arguments)})
	case "function_call_output":
		a.other(protocol.Message{Role: "tool", Content: outputText(it.output), ToolCallID: it.callID.Str})
	default:
		// reasoning, item_reference, built-in tool calls …: no chat-shaped message,
		// and transparent to an assistant run.
	}
}

// assistant returns the open assistant run, starting one if needed.
func (a *assembler) assistant() *protocol.Message {
	if !a.run {
		a.msgs = append(a.msgs, protocol.Message{Role: "assistant"})
		a.run = true
	}
	return &a.msgs[len(a.msgs)-1]
}

// assistantText joins an assistant message's text to the run ("\n" between texts;
// empty texts add nothing).
func (a *assembler) assistantText(t string) {
	m := a.assistant()
	switch {
	case t == "":
	case m.Content == "":
		m.Content = t
	default:
		m.Content += "\n" + t
	}
}

// call adds a function call to the run.
func (a *assembler) call(tc protocol.ToolCall) {
	m := a.assistant()
	m.ToolCalls = append(m.ToolCalls, tc)
}

// other adds a message that is not the assistant's; it ends the run.
func (a *assembler) other(m protocol.Message) {
	a.msgs = append(a.msgs, m)
	a.run = false
}

// answer is the one assistant message of a response's output items (role
// "assistant" even when the output holds none).
func answer(output gjson.Result) protocol.Message {
	var a assembler
	if output.IsArray() {
		output.ForEach(func(_, v gjson.Result) bool {
			a.item(v, nil)
			return true
		})
	}
	for i := len(a.msgs) - 1; i >= 0; i-- {
		if a.msgs[i].Role == "assistant" {
			return a.msgs[i]
		}
	}
	return protocol.Message{Role: "assistant"}
}

// isTextPart reports whether a content part type carries text.
func isTextPart(typ string) bool {
	return typ == "input_text" || typ == "output_text" || typ == "text"
}

// contentText returns the text of a message's content: a string as is, a list of
// parts as its text parts (input_text, output_text) joined with "\n" (images, files
// and refusals carry none), anything else as "". visit, when not nil, sees every text.
func contentText(c gjson.Result, visit func(text gjson.Result)) string {
	switch {
	case c.Type == gjson.String:
		if visit != nil {
			visit(c)
		}
		return c.Str
	case !c.IsArray():
		return ""
	}
	var out string
	n := 0
	c.ForEach(func(_, p gjson.Result) bool {
		if !p.IsObject() {
			return true
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
		if !isTextPart(typ.Str) || text.Type != gjson.String {
			return true
		}
		if visit != nil {
			visit(text)
		}
		if n > 0 {
			out += "\n"
		}
		out += text.Str
		n++
		return true
	})
	return out
}

// outputText is the text of a function_call_output's output: a string, or the text
// parts of a list.
func outputText(o gjson.Result) string {
	if o.Type == gjson.String {
		return o.Str
	}
	return contentText(o, nil)
}

// arguments is the JSON text of a call's arguments. The API sends a string; a client
// may send the object itself, whose raw text is the same JSON.
func arguments(v gjson.Result) string {
	switch v.Type {
	case gjson.String:
		return v.Str
	case gjson.JSON:
		return v.Raw
	}
	return ""
}
