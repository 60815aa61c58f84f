package openai

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/camproxy/camproxy/protocol"
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
	out := make([]byte, 0, len(body)+len(text)+len(text)/8+48)
	out = append(out, body[:a.at]...)
	out = appendInsert(out, a, text)
	return append(out, body[a.at:]...)
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

// appendInsert appends what anchor a inserts, holding text, to dst.
func appendInsert(dst []byte, a anchor, text string) []byte {
	switch a.kind {
	case insPart:
		if a.comma {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"text","text":"`...)
		dst = appendEscaped(dst, text)
		return append(dst, `"}`...)
	case insSystemMessage:
		dst = append(dst, `{"role":"system","content":"`...)
		dst = appendEscaped(dst, text)
		dst = append(dst, `"}`...)
		if a.comma {
			dst = append(dst, ',')
		}
		return dst
	case insUserMessage:
		dst = append(dst, `,{"role":"user","content":"`...)
		dst = appendEscaped(dst, text)
		return append(dst, `"}`...)
	}
	return appendEscaped(dst, text)
}

// appendEscaped appends s as the inside of a JSON string, escaped as encoding/json
// does with SetEscapeHTML(false): quote, backslash and control characters escaped,
// U+2028 and U+2029 escaped for JavaScript, invalid UTF-8 replaced by U+FFFD.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}
