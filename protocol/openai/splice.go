package openai

import (
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

// SpliceTo appends to dst body with text inserted per placement and returns the
// extended slice; body is not modified.
// text is already rendered (the template applied). If Task == "" it appends body
// unchanged for AppendToTask/NewMessage (System still works). body must be the body
// given to Parse; any other body, an unknown placement or an empty text are
// appended unchanged.
func (r *Request) SpliceTo(dst, body []byte, p protocol.Placement, text string) []byte {
	a, ok := r.anchorFor(p)
	return jsontext.Spliced(body, r.bodyLen, jsontext.Anchor{At: a.at, Wrap: a.wrap()}, ok, text).AppendTo(dst, body)
}

// anchorFor resolves a placement to an anchor; false when there is none.
func (r *Request) anchorFor(p protocol.Placement) (anchor, bool) {
	return protocol.ByPlacement(p, r.Task != "", r.sys,
		anchor{at: r.task.at, kind: insText},
		anchor{at: r.task.msgEnd, kind: insUserMessage, comma: true})
}

// wrap returns the JSON that anchor a writes around the escaped text. A new message
// or part holds the context alone: a template's leading blank lines only separate
// it from the text it would follow.
func (a anchor) wrap() jsontext.Wrap {
	switch a.kind {
	case insPart:
		if a.comma {
			return jsontext.Wrap{Prefix: `,{"type":"text","text":"`, Suffix: `"}`, Trim: true}
		}
		return jsontext.Wrap{Prefix: `{"type":"text","text":"`, Suffix: `"}`, Trim: true}
	case insSystemMessage:
		if a.comma {
			return jsontext.Wrap{Prefix: `{"role":"system","content":"`, Suffix: `"},`, Trim: true}
		}
		return jsontext.Wrap{Prefix: `{"role":"system","content":"`, Suffix: `"}`, Trim: true}
	case insUserMessage:
		return jsontext.Wrap{Prefix: `,{"role":"user","content":"`, Suffix: `"}`, Trim: true}
	}
	return jsontext.Wrap{}
}
