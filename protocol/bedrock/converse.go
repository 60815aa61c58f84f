package bedrock

import (
	"strings"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// ConverseRequest is a parsed body of the Converse shape: a Converse or
// ConverseStream call, or an InvokeModel call of an Amazon Nova model, whose
// messages-v1 body has the same system and messages.
type ConverseRequest struct {
	protocol.View // Model (from the path), Stream, Messages (normalised), Task

	op  Op
	fam family // famNova for an InvokeModel body, else famUnknown

	// bodyLen is the length of the parsed body: SpliceTo refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	objOpen int // offset of the '{' that opens the body

	// sysState says what the body's "system" is: absent, an array (sysClose is the
	// offset of its ']' and sysBlocks its length) or something else.
	sysState  int
	sysClose  int
	sysBlocks int

	// msgsOpen is the offset of the '[' of messages, msgsLen its length.
	msgsOpen, msgsLen int
	// first is the first Bedrock message when it is a user message whose content
	// is an array: where NewMessage puts context found in the system prompt.
	first struct {
		ok     bool
		open   int // offset of the '[' of its content
		blocks int
	}

	task convTask // meaningful only when Task != ""
}

const (
	sysAbsent = iota
	sysArray
	sysOther
)

// convTask locates the task inside the raw body.
type convTask struct {
	inSystem bool
	at       int // raw offset right after the task text (AppendToTask inserts here)
	close    int // offset of the ']' closing the task message's content
}

// convSegment is one text that task rules read: a text block of the system prompt
// or of a user message.
type convSegment struct {
	sys   bool
	msg   int    // index of the normalised message holding the text
	idx   int    // raw offset of the string's opening quote
	raw   string // the raw JSON string, quotes included
	text  string // its decoded value
	close int    // offset of the ']' closing the content array (user texts)
}

// parseConverse reads a body of the Converse shape.
func parseConverse(body []byte, rules []protocol.TaskRule, fam family, op Op) (*ConverseRequest, error) {
	// Elements sent before are validated once, when first read (memo).
	hits := convMemo.Hits()
	defer hits.Release()
	// Read in place, never retained: the system prompt is copied and messages are
	// read from private copies of their bytes (memo), so the view stays valid after
	// the caller reuses its buffer.
	js, open, err := jsontext.Object(body, hits)
	if err != nil {
		return nil, err
	}
	r := &ConverseRequest{op: op, fam: fam, bodyLen: len(body), objOpen: open}
	r.Stream = op.Stream()
	var sys gjson.Result
	msgs := -1
	// One walk of the body; the last of duplicate keys wins.
	jsontext.Members(body, js, open, func(key string, v int) int {
		switch key {
		case "system":
			var end int
			sys, end = jsontext.DetachAt(body, js, v)
			return end
		case "messages":
			msgs = v
			if body[v] == '[' {
				r.msgsOpen = v
				return jsontext.ReadElements(body, v, hits, readConvElement)
			}
		}
		return -1
	})
	if msgs < 0 || body[msgs] != '[' {
		return nil, protocol.Missing("messages", "an array")
	}
	sysMsg, segs := r.readSystem(sys)
	segs = r.setMessages(hits.Walked(), sysMsg, segs)
	r.findTask(rules, body, segs)
	return r, nil
}

// readSystem normalises the system prompt into a leading system message (its text
// blocks joined with "\n"; nil when it has none) and returns its texts.
func (r *ConverseRequest) readSystem(sys gjson.Result) (*protocol.Message, []convSegment) {
	switch {
	case !sys.Exists():
		r.sysState = sysAbsent
		return nil, nil
	case !sys.IsArray():
		r.sysState = sysOther
		return nil, nil
	}
	r.sysState = sysArray
	r.sysClose = closeOf(sys)
	var segs []convSegment
	var j jsontext.Joiner
	sys.ForEach(func(_, b gjson.Result) bool {
		r.sysBlocks++
		if t := jsontext.ObjectKey(b, "text"); t.Type == gjson.String {
			segs = append(segs, convSegment{sys: true, idx: t.Index, raw: t.Raw, text: t.Str})
			j.Add(t.Str)
		}
		return true
	})
	if j.Len() == 0 {
		return nil, segs
	}
	return &protocol.Message{Role: "system", Content: j.String()}, segs
}

// convElement is what one element of the messages array reads as, remembered by its
// bytes (convMemo) since an agent resends every earlier message on every call: its
// messages (tool results first, see readConvElement) with a slot each, the texts
// task rules read (msg indexes msgs) and, for a user message whose content is an
// array, where that array opens. Offsets count from the element's first byte.
// Shared: never modified.
type convElement struct {
	msgs   []protocol.Message
	slots  []protocol.Slot
	texts  []convSegment
	open   int // offset of the content's '[' of a user message; -1 otherwise
	blocks int // elements of that content
}

// Messages is the element's messages and their slots (protocol.Element).
func (e *convElement) Messages() ([]protocol.Message, []protocol.Slot) { return e.msgs, e.slots }

// convMemo remembers the elements of Converse calls (protocol.MemoBytes at most).
var convMemo = protocol.NewMemo[*convElement](protocol.MemoBytes)

// readConvElement normalises one Converse message to the OpenAI chat shape: its text
// blocks joined with "\n" become its content, toolUse blocks its tool calls, and its
// toolResult blocks become one tool message each, in front of the message that holds
// its text (omitted when it has none). raw is the element's own copy, which what it
// returns may alias.
func readConvElement(raw string) *convElement {
	e := &convElement{open: -1}
	m := gjson.Result{Type: gjson.JSON, Raw: raw}
	var role, content gjson.Result
	if m.IsObject() {
		m.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role":
				role = v
			case "content":
				content = v
			}
			return true
		})
	}
	user := role.Str == "user"
	results := 0
	out, held, blocks := convMessage(role.Str, content, func(v gjson.Result) {
		if user {
			e.texts = append(e.texts, convSegment{idx: v.Index, raw: v.Raw, text: v.Str, close: closeOf(content)})
		}
	}, func(m protocol.Message) {
		e.msgs = append(e.msgs, m)
		results++
	})
	if user && content.IsArray() {
		e.open, e.blocks = content.Index, blocks
	}
	if !user || results == 0 || held {
		for i := range e.texts {
			e.texts[i].msg = len(e.msgs)
		}
		e.msgs = append(e.msgs, out)
	} else {
		e.texts = nil // only tool results: they are the messages
	}
	e.slots = make([]protocol.Slot, len(e.msgs))
	return e
}

// setMessages sets the view's messages — sys (the system prompt, when not nil), then
// those of the elements of the messages array (the last one, on a duplicate key) —
// and appends the texts of user messages to segs.
func (r *ConverseRequest) setMessages(els []protocol.Placed[*convElement], sys *protocol.Message, segs []convSegment) []convSegment {
	r.msgsLen = len(els)
	n := 0 // messages before the element's
	if sys != nil {
		n++
	}
	for k, p := range els {
		e := p.V
		if k == 0 && e.open >= 0 {
			r.first.ok, r.first.open, r.first.blocks = true, p.At+e.open, e.blocks
		}
		for _, s := range e.texts {
			s.msg += n
			s.idx += p.At
			s.close += p.At
			segs = append(segs, s)
		}
		n += len(e.msgs)
	}
	protocol.Collect(&r.View, sys, els)
	return segs
}

// readToolUse reads {toolUseId, name, input}; the arguments are the input as
// compact JSON.
func readToolUse(v gjson.Result) protocol.ToolCall {
	tc := protocol.ToolCall{Type: "function"}
	if !v.IsObject() {
		return tc
	}
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "toolUseId":
			tc.ID = f.Str
		case "name":
			tc.Name = f.Str
		case "input":
			tc.Arguments = jsontext.Compact(f.Raw)
		}
		return true
	})
	return tc
}

// readToolResult reads {toolUseId, content:[{text}|{json}|{image}|{document}|…],
// status} into a tool message whose content is its texts and JSON values (compact)
// joined with "\n", and its parts when it holds media.
func readToolResult(v gjson.Result) protocol.Message {
	m := protocol.Message{Role: "tool"}
	if !v.IsObject() {
		return m
	}
	var j jsontext.Joiner
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "toolUseId":
			m.ToolCallID = f.Str
		case "content":
			if !f.IsArray() {
				return true
			}
			media := false
			f.ForEach(func(_, b gjson.Result) bool {
				if !b.IsObject() {
					return true
				}
				b.ForEach(func(bk, bv gjson.Result) bool {
					switch bk.Str {
					case "text":
						if bv.Type == gjson.String {
							j.Add(bv.Str)
						}
					case "json":
						j.Add(jsontext.Compact(bv.Raw))
					case "image", "document", "video":
						media = true
					}
					return true
				})
				return true
			})
			if media {
				m.Parts = convParts(f)
			}
		}
		return true
	})
	m.Content = j.String()
	return m
}

// closeOf is the offset of the last byte of a value: the ']' or '}' that closes an
// array or object, the quote that closes a string.
func closeOf(v gjson.Result) int { return v.Index + len(v.Raw) - 1 }

// findTask applies rules in order (protocol.FindTask); the first that matches sets
// r.Task and r.task. The anchor is the end of the task in the text it was found in.
func (r *ConverseRequest) findTask(rules []protocol.TaskRule, body []byte, segs []convSegment) {
	ps := make([]protocol.Segment, len(segs))
	turn, counted := 0, 0 // assistant messages in r.Messages[:counted]
	for k, s := range segs {
		if s.sys {
			ps[k] = protocol.Segment{Msg: -1, Role: "system", Text: s.text, Offset: s.idx}
			continue
		}
		for ; counted < s.msg; counted++ {
			if r.Messages[counted].Role == "assistant" {
				turn++
			}
		}
		ps[k] = protocol.Segment{Msg: s.msg, Role: "user", Text: s.text, Turn: turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return
	}
	s := segs[f.Seg]
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = convTask{inSystem: s.sys, at: s.idx + jsontext.QuotedOffset(s.raw, f.End), close: s.close}
}

// Parsed returns the call's view.
func (r *ConverseRequest) Parsed() *protocol.View { return &r.View }

// SpliceTo appends to dst body with text inserted per placement and returns the
// extended slice; body is not modified.
//
//   - AppendToTask inserts text into the string of the text block that holds the
//     task, right after the task.
//   - System appends a block {"text":…} to the system array, or inserts
//     "system":[{"text":…}] at the front of the body when it has none.
//   - NewMessage appends a block {"text":…} to the content of the task message.
//     Bedrock rejects two user messages in a row, so the context cannot be a
//     message of its own there; when the task is in the system prompt the block
//     goes in front of the first user message, or a user message holding it goes
//     in front of the messages when they do not start with one.
//
// New blocks hold the text with its leading whitespace trimmed. With no task,
// AppendToTask and NewMessage append body unchanged, as do a body other than the
// one parsed, an unknown placement and an empty text.
func (r *ConverseRequest) SpliceTo(dst, body []byte, p protocol.Placement, text string) []byte {
	return r.insertion(body, p, text).AppendTo(dst, body)
}

// insertion resolves a splice.
func (r *ConverseRequest) insertion(body []byte, p protocol.Placement, text string) jsontext.Insertion {
	if len(body) != r.bodyLen || text == "" {
		return jsontext.Insertion{}
	}
	if p != protocol.AppendToTask {
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
		if text == "" {
			return jsontext.Insertion{}
		}
	}
	switch p {
	case protocol.AppendToTask:
		if r.Task == "" {
			return jsontext.Insertion{}
		}
		return ins(r.task.at, "", text, "")
	case protocol.System:
		switch r.sysState {
		case sysAbsent:
			return ins(r.objOpen+1, `"system":[{"text":"`, text, `"}],`)
		case sysArray:
			return ins(r.sysClose, sep(r.sysBlocks > 0)+`{"text":"`, text, `"}`)
		}
	case protocol.NewMessage:
		switch {
		case r.Task == "":
		case !r.task.inSystem:
			return ins(r.task.close, `,{"text":"`, text, `"}`)
		case r.first.ok:
			return ins(r.first.open+1, `{"text":"`, text, `"}`+sep(r.first.blocks > 0))
		default:
			return ins(r.msgsOpen+1, `{"role":"user","content":[{"text":"`, text, `"}]}`+sep(r.msgsLen > 0))
		}
	}
	return jsontext.Insertion{}
}

// sep is "," when an array already has elements.
func sep(nonEmpty bool) string {
	if nonEmpty {
		return ","
	}
	return ""
}

// Decoder returns a decoder for the answer: an event stream for ConverseStream and
// InvokeModelWithResponseStream, else a JSON body.
func (r *ConverseRequest) Decoder() protocol.Decoder {
	switch {
	case r.op == ConverseStream:
		return newStreamDecoder(streamConverse)
	case r.op == InvokeStream:
		return newStreamDecoder(streamNova)
	}
	return newJSONDecoder(decodeConverseResponse)
}
