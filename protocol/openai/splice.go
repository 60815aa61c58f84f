package openai

import (
	"strings"
	"unicode"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// insertKind says what bytes an insertion writes around the escaped text.
type insertKind int

const (
	// insText writes the escaped text alone, inside an existing string.
	insText insertKind = iota
	// insPart writes a text part at the end of a content array.
	insPart
	// insSystemMessage writes a system message at the front of the messages array.
	insSystemMessage
	// insUserMessage writes a user message after the task message.
	insUserMessage
)

// anchor is one place to insert at and the shape of what goes there.
type anchor struct {
	at    int // raw offset of the insertion
	kind  insertKind
	comma bool // a separator is needed: the array is not empty
}

// Splice returns a new body with text inserted per placement; body is not modified.
// text is already rendered (the template applied). If Task == "" it returns body
// unchanged for AppendToTask/NewMessage (System still works). body must be the body
// given to Parse; any other body, an unknown placement or an empty text come back
// unchanged (the same slice).
func (r *Request) Splice(body []byte, p protocol.Placement, text string) []byte {
	a, ok := r.anchorFor(p)
	if !ok || len(body) != r.bodyLen || a.at > len(body) {
		return body
	}
	if a.kind != insText {
		// A new message or part holds the context alone: a template's leading
		// blank lines only separate it from the text it would follow.
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
	}
	if text == "" {
		return body
	}
	prefix, suffix := a.wrap()
	return jsontext.Insert(body, a.at, prefix, text, suffix)
}

// anchorFor resolves a placement to an anchor; false when there is none.
func (r *Request) anchorFor(p protocol.Placement) (anchor, bool) {
	switch p {
	case protocol.System:
		return r.sys, true
	case protocol.AppendToTask:
		return anchor{at: r.task.at, kind: insText}, r.Task != ""
	case protocol.NewMessage:
		return anchor{at: r.task.msgEnd, kind: insUserMessage, comma: true}, r.Task != ""
	}
	return anchor{}, false
}

// wrap returns the JSON that anchor a writes around the escaped text.
func (a anchor) wrap() (prefix, suffix string) {
	switch a.kind {
	case insPart:
		if a.comma {
			return `,{"type":"text","text":"`, `"}`
		}
		return `{"type":"text","text":"`, `"}`
	case insSystemMessage:
		if a.comma {
			return `{"role":"system","content":"`, `"},`
		}
		return `{"role":"system","content":"`, `"}`
	case insUserMessage:
		return `,{"role":"user","content":"`, `"}`
	}
	return "", ""
}
