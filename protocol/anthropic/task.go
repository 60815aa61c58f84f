package anthropic

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// findTask applies rules in order (protocol.FindTask); the first that matches sets
// r.Task and r.task. The anchor is the end of the task in the text it was found in.
func (r *Request) findTask(rules []protocol.TaskRule, body []byte, segs []segment) {
	ps := make([]protocol.Segment, len(segs))
	for k, s := range segs {
		role := "user"
		if s.msg < 0 {
			role = "system"
		}
		ps[k] = protocol.Segment{Msg: s.msg, Role: role, Text: s.text, Turn: s.turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return
	}
	s := segs[f.Seg]
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = taskSpot{at: s.idx + jsontext.QuotedOffset(s.raw, f.End), after: r.newMessageAnchor(s)}
}

// newMessageAnchor says where NewMessage inserts for a task found in s: right after
// its message, or at the front of the messages when the task is in the system prompt.
func (r *Request) newMessageAnchor(s segment) anchor {
	if s.msg >= 0 {
		return anchor{At: s.msgEnd, Wrap: jsontext.Wrap{Prefix: `,{"role":"user","content":"`, Suffix: `"}`, Trim: true}}
	}
	suffix := `"}`
	if r.wireMessages > 0 {
		suffix = `"},`
	}
	return anchor{At: r.arrOpen + 1, Wrap: jsontext.Wrap{Prefix: `{"role":"user","content":"`, Suffix: suffix, Trim: true}}
}
