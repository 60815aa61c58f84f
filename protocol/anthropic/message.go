package anthropic

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// segment is one text that task rules read: the top-level system prompt (a string
// or one of its text blocks), or the string content or one text block of a user
// message.
type segment struct {
	msg    int    // index of the message in the messages array, -1 for the system prompt
	idx    int    // raw offset of the string's opening quote
	raw    string // the raw JSON string, quotes included
	text   string // its decoded value
	msgEnd int    // raw offset right after the message object; unused for the system prompt
	turn   int    // assistant messages before the text's message
}

// block holds the fields of one content block that the normalisation reads. On
// duplicate keys the last one wins, as in the decoders upstream.
type block struct {
	typ, text, id, name, input, toolUseID, content, source, title gjson.Result
}

// readBlock walks the keys of one content block once.
func readBlock(b gjson.Result) block {
	var f block
	if !b.IsObject() {
		return f
	}
	b.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			f.typ = v
		case "text":
			f.text = v
		case "id":
			f.id = v
		case "name":
			f.name = v
		case "input":
			f.input = v
		case "tool_use_id":
			f.toolUseID = v
		case "content":
			f.content = v
		case "source":
			f.source = v
		case "title":
			f.title = v
		}
		return true
	})
	return f
}

// isText reports whether the block is {"type":"text","text":"…"}.
func (b *block) isText() bool { return b.typ.Str == "text" && b.text.Type == gjson.String }

// toolCall normalises a tool_use block.
func (b *block) toolCall() protocol.ToolCall {
	return protocol.ToolCall{ID: b.id.Str, Type: "function", Name: b.name.Str, Arguments: jsontext.Compact(b.input.Raw)}
}

// blocksText returns the text of a string, or of the text blocks of an array joined
// with "\n" (images, documents and other blocks carry no text); "" otherwise. visit,
// when not nil, sees every text; n is the number of elements of an array.
func blocksText(c gjson.Result, visit func(text gjson.Result)) (text string, n int) {
	switch {
	case c.Type == gjson.String:
		if visit != nil {
			visit(c)
		}
		return c.Str, 0
	case !c.IsArray():
		return "", 0
	}
	var j jsontext.Joiner
	c.ForEach(func(_, v gjson.Result) bool {
		n++
		b := readBlock(v)
		if b.isText() {
			if visit != nil {
				visit(b.text)
			}
			j.Add(b.text.Str)
		}
		return true
	})
	return j.String(), n
}

// readSystem normalises the top-level system prompt into the message that goes
// first (nil when there is none), returns its texts for the task rules and sets
// where System inserts. open and closing are the offsets of the braces of the body.
func (r *Request) readSystem(system gjson.Result, open, closing int) (*protocol.Message, []segment) {
	var (
		segs []segment
		sys  *protocol.Message
	)
	visit := func(t gjson.Result) {
		segs = append(segs, segment{msg: -1, idx: t.Index, raw: t.Raw, text: t.Str, msgEnd: -1})
	}
	switch {
	case system.Type == gjson.String:
		visit(system)
		sys = &protocol.Message{Role: "system", Content: system.Str}
		// Into the string; an empty one gets no leading blank lines.
		r.sys = anchor{At: closingQuote(system), Wrap: jsontext.Wrap{Trim: system.Str == ""}}
	case system.IsArray():
		text, n := blocksText(system, visit)
		sys = &protocol.Message{Role: "system", Content: text}
		// A new text block before the ']': blocks before it keep their cache_control.
		prefix := `{"type":"text","text":"`
		if n > 0 {
			prefix = "," + prefix
		}
		r.sys = anchor{At: system.Index + len(system.Raw) - 1, Wrap: jsontext.Wrap{Prefix: prefix, Suffix: `"}`, Trim: true}}
	case !system.Exists():
		// The first member; the body has at least "messages" after it.
		r.sys = anchor{At: open + 1, Wrap: jsontext.Wrap{Prefix: `"system":"`, Suffix: `",`, Trim: true}}
	default:
		// null or a wrong type: a second "system" member, last, so that it is the
		// one a last-key-wins decoder keeps.
		r.sys = anchor{At: closing, Wrap: jsontext.Wrap{Prefix: `,"system":"`, Suffix: `"`, Trim: true}}
	}
	return sys, segs
}

// element is what one element of the messages array reads as, remembered by its
// bytes (memo) since an agent resends every earlier message on every call: its
// messages (tool results first, see readBlocks), the texts task rules read, and
// whether it is the assistant's. Offsets count from the element's first byte.
// Shared: never modified.
type element struct {
	msgs      []protocol.Message
	texts     []segment // msg, msgEnd and turn unset
	assistant bool
	slots     []protocol.Slot // one per message
}

// memo remembers the elements of this adapter's calls (protocol.MemoBytes at most).
var memo = protocol.NewMemo[*element](protocol.MemoBytes)

// readElement reads one element of a messages array: raw is the element's own copy,
// which what it returns may alias.
func readElement(raw string) *element {
	e := &element{}
	v := gjson.Result{Type: gjson.JSON, Raw: raw}
	if !v.IsObject() {
		e.msgs = []protocol.Message{{}}
		e.slots = make([]protocol.Slot, 1)
		return e
	}
	var role, content gjson.Result
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "role":
			role = f
		case "content":
			content = f
		}
		return true
	})
	user := role.Str == "user"
	visit := func(t gjson.Result) {
		if user {
			e.texts = append(e.texts, segment{idx: t.Index, raw: t.Raw, text: t.Str})
		}
	}
	e.assistant = role.Str == "assistant"
	if content.Type == gjson.String {
		visit(content)
		e.msgs = []protocol.Message{{Role: role.Str, Content: content.Str}}
	} else {
		var r Request
		r.readBlocks(role.Str, content, visit)
		e.msgs = r.Messages
	}
	e.slots = make([]protocol.Slot, len(e.msgs))
	return e
}

// Messages is the element's messages and their slots (protocol.Element).
func (e *element) Messages() ([]protocol.Message, []protocol.Slot) { return e.msgs, e.slots }

// setMessages sets the view's messages — sys (the system prompt, when not nil), then
// those of the elements of the messages array (the last one, on a duplicate key) — and
// appends the texts task rules may read to segs.
func (r *Request) setMessages(els []protocol.Placed[*element], sys *protocol.Message, segs []segment) []segment {
	r.wireMessages = len(els)
	turn := 0 // assistant messages so far
	for w, p := range els {
		for _, t := range p.V.texts {
			t.msg, t.idx, t.msgEnd, t.turn = w, p.At+t.idx, p.End, turn
			segs = append(segs, t)
		}
		if p.V.assistant {
			turn++
		}
	}
	protocol.Collect(&r.View, sys, els)
	return segs
}

// readBlocks normalises one message whose content is not a string (blockMessage):
// for a user message, each tool_result block first as a message of role "tool", and
// the rest of the message (if anything) after them.
func (r *Request) readBlocks(role string, content gjson.Result, visit func(gjson.Result)) {
	var (
		results  int
		onResult func(protocol.Message)
	)
	if role == "user" {
		onResult = func(m protocol.Message) {
			r.Messages = append(r.Messages, m)
			results++
		}
	}
	m, held := blockMessage(role, content, visit, onResult)
	if results > 0 && !held {
		return // the tool results were all the message held
	}
	r.Messages = append(r.Messages, m)
}

// closingQuote is the raw offset of the quote that closes a string value.
func closingQuote(s gjson.Result) int { return s.Index + len(s.Raw) - 1 }
