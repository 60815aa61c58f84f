package anthropic

import (
	"strings"
	"unicode"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// anchor is one place to insert at and the JSON that goes around the escaped text.
type anchor struct {
	at             int    // raw offset of the insertion
	prefix, suffix string // written as they are around the escaped text
	// trim drops the text's leading whitespace: a new block, member or message holds
	// the context alone, and a template's leading blank lines only separate it from
	// the text it would follow.
	trim bool
}

// Splice returns a new body with text inserted per placement; body is not modified.
// text is already rendered (the template applied).
//
//   - AppendToTask: right after the task text, inside its string.
//   - System: at the end of the top-level system string; as a new text block at the
//     end of a system array; as a new "system" member first in the body when there
//     is none (last, when "system" is null, so that it wins).
//   - NewMessage: a new user message right after the task message (at the front of
//     the messages when the task is in the system prompt).
//
// If Task == "" it returns body unchanged for AppendToTask and NewMessage (System
// still works). body must be the body given to Parse; any other body, an unknown
// placement or an empty text come back unchanged (the same slice).
func (r *Request) Splice(body []byte, p protocol.Placement, text string) []byte {
	a, ok := r.anchorFor(p)
	if !ok || len(body) != r.bodyLen || a.at > len(body) {
		return body
	}
	if a.trim {
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
	}
	if text == "" {
		return body
	}
	return jsontext.Insert(body, a.at, a.prefix, text, a.suffix)
}

// anchorFor resolves a placement to an anchor; false when there is none.
func (r *Request) anchorFor(p protocol.Placement) (anchor, bool) {
	switch p {
	case protocol.System:
		return r.sys, true
	case protocol.AppendToTask:
		return anchor{at: r.task.at}, r.Task != ""
	case protocol.NewMessage:
		return r.task.after, r.Task != ""
	}
	return anchor{}, false
}
