package anthropic

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// anchor is one place to insert at and the JSON that goes around the escaped text.
type anchor = jsontext.Anchor

// SpliceTo appends to dst body with text inserted per placement and returns the
// extended slice; body is not modified.
// text is already rendered (the template applied).
//
//   - AppendToTask: right after the task text, inside its string.
//   - System: at the end of the top-level system string; as a new text block at the
//     end of a system array; as a new "system" member first in the body when there
//     is none (last, when "system" is null, so that it wins).
//   - NewMessage: a new user message right after the task message (at the front of
//     the messages when the task is in the system prompt).
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
