package bedrock

import (
	"fmt"
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

	// bodyLen is the length of the parsed body: Splice refuses a different body
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
	root, err := rootObject(body)
	if err != nil {
		return nil, err
	}
	r := &ConverseRequest{op: op, fam: fam, bodyLen: len(body), objOpen: strings.IndexByte(root.Raw, '{')}
	r.Stream = op.Stream()
	var sys, msgs gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "system":
			sys = v
		case "messages":
			msgs = v
		}
		return true
	})
	if !msgs.IsArray() {
		return nil, fmt.Errorf("%w: \"messages\" is missing or not an array", protocol.ErrMissingMessages)
	}
	segs := r.readSystem(sys)
	segs = r.readMessages(msgs, segs)
	r.findTask(rules, body, segs)
	return r, nil
}

// readSystem normalises the system prompt into a leading system message (its text
// blocks joined with "\n") and returns its texts.
func (r *ConverseRequest) readSystem(sys gjson.Result) []convSegment {
	switch {
	case !sys.Exists():
		r.sysState = sysAbsent
		return nil
	case !sys.IsArray():
		r.sysState = sysOther
		return nil
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
	if j.Len() > 0 {
		r.Messages = append(r.Messages, protocol.Message{Role: "system", Content: j.String()})
	}
	return segs
}

// readMessages normalises the messages to the OpenAI chat shape: a message's text
// blocks joined with "\n" become its content, toolUse blocks its tool calls, and
// the toolResult blocks of a message become one tool message each, in front of the
// message that holds its text (omitted when it has none). It appends the texts of
// user messages to segs.
func (r *ConverseRequest) readMessages(msgs gjson.Result, segs []convSegment) []convSegment {
	r.msgsOpen = msgs.Index
	msgs.ForEach(func(_, m gjson.Result) bool {
		n := r.msgsLen
		r.msgsLen++
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
		var (
			results int
			texts   []convSegment
		)
		out, held, blocks := convMessage(role.Str, content, func(v gjson.Result) {
			texts = append(texts, convSegment{idx: v.Index, raw: v.Raw, text: v.Str, close: closeOf(content)})
		}, func(m protocol.Message) {
			r.Messages = append(r.Messages, m)
			results++
		})
		if n == 0 && role.Str == "user" && content.IsArray() {
			r.first.ok, r.first.open, r.first.blocks = true, content.Index, blocks
		}
		if role.Str == "user" && results > 0 && !held {
			return true // only tool results: they are the messages
		}
		i := len(r.Messages)
		r.Messages = append(r.Messages, out)
		if role.Str == "user" {
			for _, s := range texts {
				s.msg = i
				segs = append(segs, s)
			}
		}
		return true
	})
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

// Splice returns a new body with text inserted per placement; body is not modified.
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
// AppendToTask and NewMessage return body unchanged, as do a body other than the
// one parsed, an unknown placement and an empty text.
func (r *ConverseRequest) Splice(body []byte, p protocol.Placement, text string) []byte {
	return r.insertion(body, p, text).Apply(body)
}

// SpliceTo appends to dst the body Splice returns.
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
