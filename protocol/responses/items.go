package responses

import (
	"slices"
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

// stateItems are the item types that carry configuration or state of the
// conversation rather than conversation: they are in no message (so neither in the
// stitching chain, nor in a recorded step, nor in the task text), and an assistant run
// they sit in goes on past them. Each is here because a client sends it where a
// message would split the history differently from one call to the next; an item
// type not listed keeps its place (a message of its role, or the assistant run's raw
// items), since most item types of the API are what happened (reasoning, tool calls,
// compaction summaries that stand for the turns they replace) and the trajectory
// must keep them.
var stateItems = map[string]bool{
	// The reasoning effort from here on (GPT-6 models). Codex 0.169.0 on its default
	// model puts one after each prompt and re-sends it in place on every later call
	// (protocol/testdata/harness/codex/default-*.json). As an assistant-side item it
	// made the first call's history end in an assistant run that the next call's
	// echoed answer then joined, so the second turn never continued the first.
	"configuration_update": true,
	// "Compacts the current context. Must be the final input item": a command to
	// the server, which answers with a compaction item, never sent again itself.
	// Codex 0.169.0 knows it (its item types, read from the binary). As the last item
	// it would open an assistant run that the answer joins, giving that answer a
	// history no later call has.
	"compaction_trigger": true,
}

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
//
// An item is read once into its effect (readEffect), then applied: a request's items
// are remembered by their bytes (memo), so that a call applies the effects of the
// items it resends without reading them again.
type assembler struct {
	msgs []protocol.Message
	run  bool // the last message is an assistant run that later assistant items join
	// slots, when track is set, holds one per message: the slot of the item that
	// made it alone, nil for a run of several items (its digest is its own).
	slots []*protocol.Slot
	track bool
}

// effectOp is what an item does to the messages.
type effectOp uint8

const (
	opMessage effectOp = iota // adds a message that is not the assistant's: it ends a run
	opText                    // an assistant message's text and parts join the run
	opCall                    // a function or custom call joins the run
	opRaw                     // a model-side item joins the run verbatim
	opNone                    // a state item (stateItems): no message, the run goes on
)

// effect is one item read: what it does to the messages and the texts task rules
// read in it. Shared once remembered: never modified.
type effect struct {
	op effectOp
	// msg is the message of opMessage; for the others, the run the item makes alone.
	// Its slices are clipped, so that a run it starts copies them when it grows.
	msg   protocol.Message
	text  string            // opText
	parts []protocol.Part   // opText
	call  protocol.ToolCall // opCall
	raw   protocol.RawJSON  // opRaw
	// texts are those of a system, developer or user message, offsets counted from
	// the item's first byte (item, itemEnd and turn unset).
	texts []segment
	slot  protocol.Slot
}

// item reads one item and applies it.
func (a *assembler) item(v gjson.Result) {
	a.apply(readEffect(v))
}

// readItemEffect reads one element of the input list: raw is the element's own copy,
// which what it returns may alias.
func readItemEffect(raw string) *effect {
	return readEffect(gjson.Result{Type: gjson.JSON, Raw: raw})
}

// readEffect reads one item, v.
func readEffect(v gjson.Result) *effect {
	e := &effect{}
	it := readItem(v)
	typ := it.typ.Str
	if typ == "" && it.role.Exists() {
		typ = typeMessage // an EasyInputMessage: {role, content}
	}
	if stateItems[typ] {
		e.op = opNone
		return e
	}
	switch typ {
	case typeMessage:
		role := it.role.Str
		var each func(gjson.Result)
		if isTaskRole(role) {
			each = func(t gjson.Result) {
				e.texts = append(e.texts, segment{user: role == "user", idx: t.Index - v.Index, raw: t.Raw, text: t.Str})
			}
		}
		text, parts := contentParts(it.content, each)
		if role == "assistant" {
			e.op, e.text, e.parts = opText, text, parts
			break
		}
		e.msg = protocol.Message{Role: role, Content: text, Parts: parts}
	case typeFunctionCall:
		e.op = opCall
		e.call = protocol.ToolCall{ID: it.callID.Str, Type: protocol.ToolFunction, Name: it.name.Str, Arguments: arguments(it.arguments)}
	case typeCustomCall:
		e.op = opCall
		e.call = protocol.ToolCall{ID: it.callID.Str, Type: protocol.ToolCustom, Name: it.name.Str, Arguments: it.input.Str}
	case typeFunctionOutput, typeCustomOutput:
		text, parts := outputParts(it.output)
		e.msg = protocol.Message{Role: "tool", Content: text, Parts: parts, ToolCallID: it.callID.Str}
	case typeComputerOutput:
		// The screenshot is the output: an image part (its bytes hashed when recorded,
		// as every image), not the item verbatim with its bytes.
		e.msg = protocol.Message{Role: "tool", Parts: screenshot(it.output), ToolCallID: it.callID.Str}
	default:
		switch role := it.role.Str; {
		case role != "" && role != "assistant":
			// An item of another type that says whose it is (Codex's
			// additional_tools, role developer): a message of that role.
			e.msg = protocol.Message{Role: role, Raw: []protocol.RawJSON{protocol.RawJSON(v.Raw)}}
		case clientSide(typ):
			id := it.callID.Str
			if id == "" {
				id = it.approvalID.Str
			}
			text, _ := outputParts(it.output)
			e.msg = protocol.Message{Role: "tool", Content: text, ToolCallID: id, Raw: []protocol.RawJSON{protocol.RawJSON(v.Raw)}}
		default:
			e.op, e.raw = opRaw, protocol.RawJSON(v.Raw)
		}
	}
	if e.op != opMessage {
		var alone assembler
		alone.join(e)
		m := alone.msgs[0]
		m.Parts, m.ToolCalls, m.Raw = slices.Clip(m.Parts), slices.Clip(m.ToolCalls), slices.Clip(m.Raw)
		e.msg = m
	}
	return e
}

// apply adds what one item does to the messages.
func (a *assembler) apply(e *effect) {
	switch {
	case e.op == opNone:
		return
	case e.op == opMessage:
		a.other(e.msg)
	case !a.run:
		// The item's run alone, shared: what later items of the run add goes to a
		// copy (its slices are clipped).
		a.msgs = append(a.msgs, e.msg)
		a.run = true
	default:
		a.join(e)
		if a.track {
			a.slots[len(a.slots)-1] = nil
		}
		return
	}
	if a.track {
		a.slots = append(a.slots, &e.slot)
	}
}

// join adds an assistant-side item to the run, starting one if needed.
func (a *assembler) join(e *effect) {
	switch e.op {
	case opText:
		a.assistantText(e.text, e.parts)
	case opCall:
		a.call(e.call)
	case opRaw:
		m := a.assistant()
		m.Raw = append(m.Raw, e.raw)
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
			a.item(v)
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
