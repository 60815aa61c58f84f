package responses

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// item holds the fields of one input or output item that the normalisation reads.
// On duplicate keys the last one wins, as in the decoders upstream.
type item struct {
	typ, role, content, callID, name, arguments, input, output, approvalID gjson.Result
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
		case "input":
			it.input = f
		case "output":
			it.output = f
		case "approval_request_id":
			it.approvalID = f
		}
		return true
	})
	return it
}

// Item types the normalisation reads.
const (
	typeMessage        = "message"
	typeFunctionCall   = "function_call"
	typeFunctionOutput = "function_call_output"
	typeCustomCall     = "custom_tool_call"
	typeCustomOutput   = "custom_tool_call_output"
	typeComputerOutput = "computer_call_output"
)

// clientSide reports whether an item type comes from the client rather than the
// model: the output of a call (function_call_output, local_shell_call_output…) or an
// answer to the model's request (mcp_approval_response). Such an item ends an
// assistant run. An item of another type with a role other than assistant (Codex's
// additional_tools, role developer) is a message of that role. Every other item that
// is not a message — reasoning, web_search_call, file_search_call, computer_call,
// image_generation_call, mcp_call, item_reference, types not known yet — is the
// model's: it joins the assistant run it sits in, so that the output items of an
// answer and the same items sent back normalise alike.
func clientSide(typ string) bool {
	return strings.HasSuffix(typ, "_output") || strings.HasSuffix(typ, "_response")
}

// assembler turns items, in order, into chat-shaped messages: a run of consecutive
// model-side items becomes one assistant message (texts joined with "\n", function
// and custom calls as tool calls in order, every other item kept verbatim in Raw).
// Input items and a response's output items go through the same code, so that an
// answer and its echo in the next call's input normalise (and hash) alike.
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
		typ = typeMessage // an EasyInputMessage: {role, content}
	}
	switch typ {
	case typeMessage:
		role := it.role.Str
		var each func(gjson.Result)
		if visit != nil {
			each = func(t gjson.Result) { visit(role, t) }
		}
		text, parts := contentParts(it.content, each)
		if role == "assistant" {
			a.assistantText(text, parts)
			return
		}
		a.other(protocol.Message{Role: role, Content: text, Parts: parts})
	case typeFunctionCall:
		a.call(protocol.ToolCall{ID: it.callID.Str, Type: protocol.ToolFunction, Name: it.name.Str, Arguments: arguments(it.arguments)})
	case typeCustomCall:
		a.call(protocol.ToolCall{ID: it.callID.Str, Type: protocol.ToolCustom, Name: it.name.Str, Arguments: it.input.Str})
	case typeFunctionOutput, typeCustomOutput:
		text, parts := outputParts(it.output)
		a.other(protocol.Message{Role: "tool", Content: text, Parts: parts, ToolCallID: it.callID.Str})
	case typeComputerOutput:
		// The screenshot is the output: an image part (its bytes hashed when recorded,
		// as every image), not the item verbatim with its bytes.
		a.other(protocol.Message{Role: "tool", Parts: screenshot(it.output), ToolCallID: it.callID.Str})
	default:
		if role := it.role.Str; role != "" && role != "assistant" {
			// An item of another type that says whose it is (Codex's
			// additional_tools, role developer): a message of that role.
			a.other(protocol.Message{Role: role, Raw: []protocol.RawJSON{protocol.RawJSON(v.Raw)}})
			return
		}
		if clientSide(typ) {
			id := it.callID.Str
			if id == "" {
				id = it.approvalID.Str
			}
			text, _ := outputParts(it.output)
			a.other(protocol.Message{Role: "tool", Content: text, ToolCallID: id, Raw: []protocol.RawJSON{protocol.RawJSON(v.Raw)}})
			return
		}
		m := a.assistant()
		m.Raw = append(m.Raw, protocol.RawJSON(v.Raw))
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

// assistantText joins an assistant message's text ("\n" between texts; empty texts
// add nothing) and its parts, when it has any but text, to the run.
func (a *assembler) assistantText(t string, parts []protocol.Part) {
	m := a.assistant()
	if parts != nil || m.Parts != nil {
		if m.Parts == nil && m.Content != "" {
			m.Parts = []protocol.Part{{Type: protocol.PartText, Text: m.Content}}
		}
		if parts == nil && t != "" {
			parts = []protocol.Part{{Type: protocol.PartText, Text: t}}
		}
		m.Parts = append(m.Parts, parts...)
	}
	switch {
	case t == "":
	case m.Content == "":
		m.Content = t
	default:
		m.Content += "\n" + t
	}
}

// call adds a function or custom call to the run.
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

// contentText is the text of a message's content (see contentParts).
func contentText(c gjson.Result, visit func(text gjson.Result)) string {
	t, _ := contentParts(c, visit)
	return t
}

// contentParts returns the text of a message's content — a string as is, a list of
// parts as its text parts (input_text, output_text) joined with "\n", anything else
// as "" — and, when the list has a part other than text, every part in the chat
// shape: input_image as image_url, input_file as file, input_audio, refusal, and a
// part of another type verbatim. visit, when not nil, sees every text.
func contentParts(c gjson.Result, visit func(text gjson.Result)) (string, []protocol.Part) {
	switch {
	case c.Type == gjson.String:
		if visit != nil {
			visit(c)
		}
		return c.Str, nil
	case !c.IsArray():
		return "", nil
	}
	var (
		out   string
		n     int
		media bool
	)
	c.ForEach(func(_, p gjson.Result) bool {
		f := readPart(p)
		if isTextPart(f.typ.Str) && f.text.Type == gjson.String {
			if visit != nil {
				visit(f.text)
			}
			if n > 0 {
				out += "\n"
			}
			out += f.text.Str
			n++
			return true
		}
		media = media || p.IsObject() // a value that is not a part at all keeps nothing
		return true
	})
	if !media {
		return out, nil // the common case: texts only, no parts to allocate
	}
	var parts []protocol.Part
	c.ForEach(func(_, p gjson.Result) bool {
		f := readPart(p)
		switch {
		case isTextPart(f.typ.Str) && f.text.Type == gjson.String:
			parts = append(parts, protocol.Part{Type: protocol.PartText, Text: f.text.Str})
		case p.IsObject():
			parts = append(parts, f.part(p))
		}
		return true
	})
	return out, parts
}

// partFields holds the keys of one content part that the normalisation reads.
type partFields struct {
	typ, text, imageURL, fileID, detail, fileData, fileURL, filename, audio, refusal gjson.Result
}

func readPart(p gjson.Result) partFields {
	var f partFields
	if !p.IsObject() {
		return f
	}
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.typ = v
		case "text":
			f.text = v
		case "image_url":
			f.imageURL = v
		case "file_id":
			f.fileID = v
		case "detail":
			f.detail = v
		case "file_data":
			f.fileData = v
		case "file_url":
			f.fileURL = v
		case "filename":
			f.filename = v
		case "input_audio":
			f.audio = v
		case "refusal":
			f.refusal = v
		}
		return true
	})
	return f
}

// part is a non-text part in the chat shape; raw is the part as sent.
func (f *partFields) part(raw gjson.Result) protocol.Part {
	switch f.typ.Str {
	case "input_image", "computer_screenshot":
		m := &protocol.Media{FileID: f.fileID.Str, Detail: f.detail.Str}
		setURL(m, f.imageURL.Str)
		return protocol.Part{Type: protocol.PartImage, Media: m}
	case "input_file":
		m := &protocol.Media{FileID: f.fileID.Str, Filename: f.filename.Str, URL: f.fileURL.Str}
		if mt, data, ok := protocol.ParseDataURL(f.fileData.Str); ok {
			m.MediaType, m.Data = mt, data
		} else if f.fileData.Str != "" {
			m.Data = f.fileData.Str // bare base64
		}
		return protocol.Part{Type: protocol.PartFile, Media: m}
	case "input_audio":
		m := &protocol.Media{}
		if f.audio.IsObject() {
			m.Data = jsonStr(f.audio, "data")
			m.Format = jsonStr(f.audio, "format")
			if m.Format != "" {
				m.MediaType = "audio/" + m.Format
			}
		}
		return protocol.Part{Type: protocol.PartInputAudio, Media: m}
	case "refusal":
		return protocol.Part{Type: protocol.PartRefusal, Text: f.refusal.Str}
	}
	return protocol.Part{Type: f.typ.Str, Raw: protocol.RawJSON(raw.Raw)}
}

// setURL sets a media's URL, or its media type and bytes for a data URL.
func setURL(m *protocol.Media, u string) {
	if mt, data, ok := protocol.ParseDataURL(u); ok {
		m.MediaType, m.Data = mt, data
		return
	}
	m.URL = u
}

// jsonStr is the string member key of an object, "" when absent or not a string.
func jsonStr(obj gjson.Result, key string) string {
	var s string
	obj.ForEach(func(k, v gjson.Result) bool {
		if k.Str == key && v.Type == gjson.String {
			s = v.Str
		}
		return true
	})
	return s
}

// outputParts is the text and parts of a call's output: a string, or a list of
// content parts (input_text, input_image, input_file).
func outputParts(o gjson.Result) (string, []protocol.Part) {
	if o.Type == gjson.String {
		return o.Str, nil
	}
	return contentParts(o, nil)
}

// screenshot is a computer_call_output's output ({type: computer_screenshot,
// image_url | file_id}) as one image part.
func screenshot(o gjson.Result) []protocol.Part {
	if !o.IsObject() {
		return nil
	}
	f := readPart(o)
	return []protocol.Part{f.part(o)}
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
