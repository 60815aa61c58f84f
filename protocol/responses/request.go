// Package responses is the adapter for the OpenAI Responses API (POST /v1/responses):
// it reads a request body into a protocol view normalised to the chat shape, splices
// context into it by byte insertion, and decodes answers (a response object, or the
// SSE stream of response.* events) into normalised messages.
//
// Normalisation: `instructions` becomes a system message first; `input` is either a
// string (one user message) or a list of items: messages ({role, content} where
// content is a string or a list of input_text / output_text parts), function_call
// items ({call_id, name, arguments}) and function_call_output items ({call_id,
// output}). A run of consecutive assistant-side items — assistant messages and
// function calls, reasoning items between them being transparent — becomes one
// assistant message with its texts joined by "\n" and its calls in order, so that the
// answer of one turn (the response's output items) and the same items sent back as
// input on the next turn hash alike for stitching. function_call_output items become
// messages of role "tool". Items that carry configuration or state rather than
// conversation (configuration_update, compaction_trigger: stateItems) are in no
// message and split no run.
//
// Nothing here re-marshals a body: reading goes through gjson, which reports the raw
// byte offset of every value, and writing is a single insertion at such an offset
// (protocol/jsontext), so that every byte the client sent reaches the upstream
// unchanged.
package responses

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// Request is a parsed POST /v1/responses body: the view, and where in the body each
// placement inserts.
type Request struct {
	protocol.View // Model, Stream, Messages (normalised), Task, Continues (previous_response_id)

	// bodyLen is the length of the parsed body: SpliceTo refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	// task says where the task sits; meaningful only when Task != "".
	task taskSpot
	// sys says where the System placement inserts.
	sys anchor
	// arrOpen is the offset of the '[' that opens the input list; -1 when input is
	// not a list.
	arrOpen int
	// items is the number of elements of the input list.
	items int
}

var _ protocol.Request = (*Request)(nil)

// anchor is one place to insert at and the JSON that goes around the escaped text.
type anchor = jsontext.Anchor

// taskSpot locates the task inside the raw body.
type taskSpot struct {
	at    int    // raw offset right after the task text (AppendToTask inserts here)
	after anchor // where NewMessage inserts its user message
}

// segment is one text that task rules read: the instructions, the input string, or
// the string content or one text part of a system, developer or user message item.
type segment struct {
	item    int    // index of the item in the input list; -1 for instructions, -2 for a string input
	user    bool   // the text is a user message's
	idx     int    // raw offset of the string's opening quote
	raw     string // the raw JSON string, quotes included
	text    string // its decoded value
	itemEnd int    // raw offset right after the item object; unused for -1 and -2
	turn    int    // assistant messages before the item
}

// Parse reads a Responses API body. rules are tried in order; the first that matches
// sets Task. A body whose task no rule finds (no input, or only tool outputs after a
// previous_response_id) parses fine with Task "".
func Parse(body []byte, rules []protocol.TaskRule) (*Request, error) {
	// Items sent before are validated once, when first read (memo).
	hits := memo.Hits()
	defer hits.Release()
	// Read in place, never retained: the strings the view keeps are copied, and items
	// are read from private copies of their bytes (memo), so the view stays valid
	// after the caller reuses its buffer.
	js, open, err := jsontext.Object(body, hits)
	if err != nil {
		return nil, err
	}
	r := &Request{bodyLen: len(body), arrOpen: -1}
	var instructions, input gjson.Result
	members := 0
	// One walk of the body. Last key wins on duplicates, as in the Python and Go
	// decoders upstream.
	closing := jsontext.Members(body, js, open, func(key string, v int) int {
		members++
		var end int
		switch key {
		case "model":
			r.Model, end = jsontext.CloneString(body, js, v) // "" unless a string
		case "stream":
			r.Stream = body[v] == 't'
			return -1
		case "instructions":
			instructions, end = jsontext.DetachAt(body, js, v)
		case "input":
			r.arrOpen, input = -1, gjson.Result{}
			if body[v] == '[' {
				r.arrOpen = v
				return jsontext.ReadElements(body, v, hits, readItemEffect)
			}
			input, end = jsontext.DetachAt(body, js, v)
		case "previous_response_id":
			r.Continues, end = jsontext.CloneString(body, js, v)
		default:
			return -1
		}
		return end
	}) - 1
	head, segs := r.readInstructions(instructions, open, closing, members)
	segs = r.readInput(input, head, hits.Walked(), segs)
	r.findTask(rules, body, segs)
	return r, nil
}

// memo remembers the items of this adapter's calls (protocol.MemoBytes at most).
var memo = protocol.NewMemo[*effect](protocol.MemoBytes)

// Parsed returns the call's view.
func (r *Request) Parsed() *protocol.View { return &r.View }

// readInstructions normalises instructions into the message that goes first (nil
// when there is none), returns its text for the task rules and sets where System
// inserts.
func (r *Request) readInstructions(ins gjson.Result, open, closing, members int) (*protocol.Message, []segment) {
	switch {
	case ins.Type == gjson.String:
		// Into the string; an empty one gets no leading blank lines.
		r.sys = anchor{At: closingQuote(ins), Wrap: jsontext.Wrap{Trim: ins.Str == ""}}
		return &protocol.Message{Role: "system", Content: ins.Str}, []segment{{item: -1, idx: ins.Index, raw: ins.Raw, text: ins.Str}}
	case !ins.Exists():
		// A new first member.
		suffix := `",`
		if members == 0 {
			suffix = `"`
		}
		r.sys = anchor{At: open + 1, Wrap: jsontext.Wrap{Prefix: `"instructions":"`, Suffix: suffix, Trim: true}}
	default:
		// null or a wrong type: a second "instructions" member, last, so that it is
		// the one a last-key-wins decoder keeps.
		r.sys = anchor{At: closing, Wrap: jsontext.Wrap{Prefix: `,"instructions":"`, Suffix: `"`, Trim: true}}
	}
	return nil, nil
}

// readInput sets the view's messages — head (the instructions, when not nil), then
// input: a string (one user message), or the items of the list at r.arrOpen, els,
// assembled — and appends the texts task rules may read to segs.
func (r *Request) readInput(input gjson.Result, head *protocol.Message, els []protocol.Placed[*effect], segs []segment) []segment {
	var a assembler
	if head != nil {
		a.msgs = append(a.msgs, *head)
	}
	switch {
	case input.Type == gjson.String:
		r.Messages = append(a.msgs, protocol.Message{Role: "user", Content: input.Str})
		return append(segs, segment{item: -2, user: true, idx: input.Index, raw: input.Raw, text: input.Str})
	case r.arrOpen < 0:
		r.Messages = a.msgs
		return segs
	}
	r.items = len(els)
	// A message per item at most: each slice allocated once.
	n := len(els) + len(a.msgs)
	a.msgs = append(make([]protocol.Message, 0, n), a.msgs...)
	a.slots, a.track = make([]*protocol.Slot, len(a.msgs), n), true
	turn, seen := 0, len(a.msgs) // assistant messages in a.msgs[:seen]
	for i, p := range els {
		for ; seen < len(a.msgs); seen++ {
			if a.msgs[seen].Role == "assistant" {
				turn++
			}
		}
		for _, t := range p.V.texts {
			t.item, t.idx, t.itemEnd, t.turn = i, p.At+t.idx, p.End, turn
			segs = append(segs, t)
		}
		a.apply(p.V)
	}
	r.Messages, r.Slots = a.msgs, a.slots
	return segs
}

// isTaskRole reports whether task rules read messages of this role.
func isTaskRole(role string) bool {
	return role == "system" || role == "developer" || role == "user"
}

// closingQuote is the raw offset of the quote that closes a string value.
func closingQuote(s gjson.Result) int { return s.Index + len(s.Raw) - 1 }

// findTask applies rules in order (protocol.FindTask); the first that matches sets
// r.Task and r.task. The anchor is the end of the task in the text it was found in.
func (r *Request) findTask(rules []protocol.TaskRule, body []byte, segs []segment) {
	ps := make([]protocol.Segment, len(segs))
	for k, s := range segs {
		role := "system" // instructions, system and developer messages alike for the rules
		if s.user {
			role = "user"
		}
		msg := s.item
		if s.item == -2 {
			msg = 0 // the input string: the one user message
		}
		ps[k] = protocol.Segment{Msg: msg, Role: role, Text: s.text, Turn: s.turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return
	}
	s := segs[f.Seg]
	at := s.idx + jsontext.QuotedOffset(s.raw, f.End)
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = taskSpot{at: at, after: r.newMessageAnchor(s, at)}
}

// newMessageAnchor says where NewMessage inserts for a task found in s (whose end is
// at): right after its item; at the front of the input list when the task is in the
// instructions. When input is a string there is no list to add an item to, and
// NewMessage degrades to AppendToTask.
func (r *Request) newMessageAnchor(s segment, at int) anchor {
	switch {
	case s.item >= 0:
		return anchor{At: s.itemEnd, Wrap: jsontext.Wrap{Prefix: `,{"role":"user","content":"`, Suffix: `"}`, Trim: true}}
	case r.arrOpen >= 0:
		suffix := `"}`
		if r.items > 0 {
			suffix = `"},`
		}
		return anchor{At: r.arrOpen + 1, Wrap: jsontext.Wrap{Prefix: `{"role":"user","content":"`, Suffix: suffix, Trim: true}}
	}
	return anchor{At: at}
}

// SpliceTo appends to dst body with text inserted per placement and returns the
// extended slice; body is not modified.
// text is already rendered (the template applied).
//
//   - AppendToTask: right after the task text, inside its string (the input string
//     itself, or the first user message's last text).
//   - System: at the end of the instructions string; as a new "instructions" member
//     first in the body when there is none (last, when it is null, so that it wins).
//   - NewMessage: a new user message item right after the task's item (at the front
//     of the input list when the task is in the instructions). When input is a plain
//     string it degrades to AppendToTask.
//
// If Task == "" it appends body unchanged for AppendToTask and NewMessage (System
// still works). body must be the body given to Parse; any other body, an unknown
// placement or an empty text are appended unchanged.
func (r *Request) SpliceTo(dst, body []byte, p protocol.Placement, text string) []byte {
	a, ok := r.anchorFor(p)
	return jsontext.Spliced(body, r.bodyLen, a, ok, text).AppendTo(dst, body)
}

// anchorFor resolves a placement to an anchor; false when there is none.
func (r *Request) anchorFor(p protocol.Placement) (anchor, bool) {
	return protocol.ByPlacement(p, r.Task != "", r.sys, anchor{At: r.task.at}, r.task.after)
}
