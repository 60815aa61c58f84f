package openai

import (
	"slices"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// findTask applies rules in order (protocol.FindTask); the first that matches sets
// r.Task and r.task. The anchor is the end of the task in the text it was found in.
// ps is room for the rules' segments, returned for reuse.
func (r *Request) findTask(rules []protocol.TaskRule, body []byte, segs []segment, ps []protocol.Segment) []protocol.Segment {
	ps = slices.Grow(ps[:0], len(segs))[:len(segs)]
	turn, counted := 0, 0 // assistant messages in r.Messages[:counted]
	for k, s := range segs {
		for ; counted < s.msg; counted++ {
			if r.Messages[counted].Role == "assistant" {
				turn++
			}
		}
		ps[k] = protocol.Segment{Msg: s.msg, Role: r.Messages[s.msg].Role, Text: s.text, Turn: turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return ps
	}
	s := &segs[f.Seg]
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = taskSpot{msg: s.msg, part: s.part, at: s.idx + jsontext.QuotedOffset(s.raw, f.End), msgEnd: s.msgEnd}
	return ps
}
