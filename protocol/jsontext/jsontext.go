// Package jsontext holds the protocol-independent primitives the protocol adapters
// splice with: mapping an offset in the decoded value of a JSON string to its raw
// offset, escaping text as encoding/json does (without HTML escaping), inserting an
// escaped string into a body at a raw offset, matching a task rule's regex against
// a text, and the validation that makes a body safe to walk with gjson (its depth
// guard, and Object: the one error per bad body every adapter returns).
//
// Everything works on the raw bytes a client sent: nothing here re-marshals JSON.
package jsontext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// MaxDepth bounds the nesting of a JSON document the adapters accept. gjson
// validates recursively, so a body of a few MiB of '[' would otherwise grow the
// goroutine stack by gigabytes and kill the process; encoding/json uses the same limit.
const MaxDepth = 10000

// TooDeep reports whether body nests arrays and objects deeper than MaxDepth. It
// skips strings with IndexByte, so it costs little next to a parse. Check it before
// gjson.Valid on untrusted input.
func TooDeep(body []byte) bool {
	if len(body) <= MaxDepth {
		return false // a document needs at least one byte per level
	}
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			i = stringEnd(body, i+1)
		case '[', '{':
			depth++
			if depth > MaxDepth {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// stringEnd returns the offset of the quote that closes the string whose contents
// start at i, or len(b) when it is unterminated.
func stringEnd(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
	return len(b)
}

// Validate reports whether body is one JSON document that gjson may walk safely:
// valid, and nested no deeper than MaxDepth (gjson validates recursively).
func Validate(body []byte) error { return ValidateSkipping(body, nil) }

// ValidateSkipping is Validate that takes s's word for the elements it vouches for
// (see Skipper): a body whose messages were all validated before costs a validation
// of the rest of it, with the same errors.
func ValidateSkipping(body []byte, s Skipper) error {
	ok, deep, utf8OK := valid(body, s)
	if deep {
		return fmt.Errorf("%w: nested deeper than %d levels", protocol.ErrInvalidJSON, MaxDepth)
	}
	if !ok {
		return protocol.ErrInvalidJSON
	}
	// JSON is UTF-8 (RFC 8259); the upstreams reject anything else, and a context
	// spliced next to invalid bytes would be recorded corrupt.
	if !utf8OK {
		return fmt.Errorf("%w: the body is not valid UTF-8", protocol.ErrInvalidJSON)
	}
	return nil
}

// Object is every adapter's first step: it validates body as one JSON document
// (ValidateSkipping with s, which may be nil) and finds the object a call of every
// wire API is. It returns body as a string that aliases it — read in place; the
// caller copies what it keeps — and the offset of the '{' that opens it.
//
// The errors are one per condition, whatever the wire API: a body that is not
// valid JSON wraps protocol.ErrInvalidJSON; valid JSON that is not an object wraps
// protocol.ErrMissingMessages, since it cannot hold the conversation.
func Object(body []byte, s Skipper) (js string, open int, err error) {
	if err := ValidateSkipping(body, s); err != nil {
		return "", 0, err
	}
	open = SkipWS(body, 0) // within body: a valid document is not all whitespace
	if body[open] != '{' {
		return "", 0, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	return unsafe.String(unsafe.SliceData(body), len(body)), open, nil
}

// FirstByte returns the first byte of s that is not JSON whitespace, or 0.
func FirstByte(s string) byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return s[i]
		}
	}
	return 0
}

// FindTask matches re against text, the decoded value of a JSON string (see
// protocol.RegexTask); end maps to the raw string with RawOffset.
func FindTask(re *regexp.Regexp, text string) (task string, end int, ok bool) {
	return protocol.RegexTask(re, text)
}

// RawOffset maps an offset into the decoded value of a JSON string to the offset in
// its raw text (raw excludes the quotes), so that an insertion lands after exactly
// the decoded bytes before it and the client's escapes stay as they were.
//
// It decodes as gjson does, since gjson produced the text the offset points into:
// a \u escape of any surrogate swallows a following \u escape as its pair (an
// invalid pair decodes to U+FFFD), and a lone surrogate decodes to U+FFFD. An
// offset inside the bytes of one escape maps to the end of that escape; an offset
// past the end maps to len(raw).
func RawOffset(raw string, decoded int) int {
	i, d := 0, 0
	for d < decoded && i < len(raw) {
		if raw[i] != '\\' {
			// Plain bytes map one to one up to the next escape.
			j := strings.IndexByte(raw[i:], '\\')
			if j < 0 || d+j >= decoded {
				return min(i+decoded-d, len(raw))
			}
			i, d = i+j, d+j
			continue
		}
		if i+1 < len(raw) && raw[i+1] == 'u' && i+6 <= len(raw) {
			var n int
			i, n = unicodeEscape(raw, i)
			d += n
			continue
		}
		i, d = i+2, d+1 // \n, \", \\, \/ and friends decode to one byte
	}
	return min(i, len(raw))
}

// QuotedOffset is RawOffset for a raw JSON string with its quotes, such as the Raw
// of a gjson.Result of type String: the offset it returns counts the opening quote.
func QuotedOffset(quoted string, decoded int) int {
	if len(quoted) < 2 {
		return 0
	}
	return 1 + RawOffset(quoted[1:len(quoted)-1], decoded)
}

// unicodeEscape decodes the \uXXXX escape at raw[i:] (and the pair gjson joins to
// it) and returns the offset after it and the number of UTF-8 bytes it decodes to.
func unicodeEscape(raw string, i int) (next, n int) {
	r := hex4(raw[i+2 : i+6])
	i += 6
	if utf16.IsSurrogate(r) && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
		r = utf16.DecodeRune(r, hex4(raw[i+2:i+6]))
		i += 6
	}
	n = utf8.RuneLen(r)
	if n < 0 {
		n = utf8.RuneLen(utf8.RuneError) // written as U+FFFD
	}
	return i, n
}

// hex4 parses four hex digits; invalid digits count as 0, as in gjson (a validated
// body has none).
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4 && i < len(s); i++ {
		c := s[i]
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0
		}
		r = r<<4 | rune(v)
	}
	return r
}

// An Insertion is a splice resolved against a parsed body: Text, escaped as the
// inside of a JSON string (AppendEscaped), between Prefix and Suffix, at offset At;
// OK false when there is nothing to insert. Prefix and Suffix are written as they
// are: they carry the JSON around the text, such as `{"type":"text","text":"` and
// `"}`.
type Insertion struct {
	At                   int
	Prefix, Text, Suffix string
	OK                   bool
}

// AppendTo appends body with the insertion made (body as it is when there is none)
// to dst and returns the extended slice. body is not modified; At must be within it.
func (in Insertion) AppendTo(dst, body []byte) []byte {
	if !in.OK {
		return append(dst, body...)
	}
	dst = append(dst, body[:in.At]...)
	dst = append(dst, in.Prefix...)
	dst = AppendEscaped(dst, in.Text)
	dst = append(dst, in.Suffix...)
	return append(dst, body[in.At:]...)
}

// Wrap is what an insertion writes around the escaped text: Prefix and Suffix as
// they are, and Trim drops the text's leading whitespace — a new block, member, part
// or message holds the context alone, and a template's leading blank lines only
// separate it from the text it would follow.
type Wrap struct {
	Prefix, Suffix string
	Trim           bool
}

// An Anchor is where a placement inserts in a parsed body: a raw offset, and what
// goes around the text there.
type Anchor struct {
	At int // raw offset of the insertion
	Wrap
}

// Spliced is the insertion every byte-inserting adapter makes once it has resolved
// a placement to an anchor: text, wrapped, at the anchor. a was found in a parsed
// body of bodyLen bytes; ok false (the placement has no anchor), another body, an
// offset past its end or an empty text (once trimmed) insert nothing.
func Spliced(body []byte, bodyLen int, a Anchor, ok bool, text string) Insertion {
	if !ok || len(body) != bodyLen || a.At > len(body) {
		return Insertion{}
	}
	if a.Trim {
		text = strings.TrimLeftFunc(text, unicode.IsSpace)
	}
	if text == "" {
		return Insertion{}
	}
	return Insertion{At: a.At, Prefix: a.Prefix, Text: text, Suffix: a.Suffix, OK: true}
}

// ObjectBounds returns the offsets of the '{' and '}' that open and close the valid
// JSON document js, or -1, -1 when it is not an object: where an adapter adds a
// first or a last member.
func ObjectBounds(js string) (open, closing int) {
	if FirstByte(js) != '{' {
		return -1, -1
	}
	open, closing = 0, len(js)-1
	for js[open] != '{' {
		open++
	}
	for js[closing] != '}' {
		closing--
	}
	return open, closing
}

// AppendEscaped appends s as the inside of a JSON string (protocol.AppendEscaped:
// encoding/json's escaping with SetEscapeHTML(false)).
func AppendEscaped(dst []byte, s string) []byte { return protocol.AppendEscaped(dst, s) }

// ObjectKey returns the value of key in obj; the last one on duplicate keys, as the
// decoders upstream read them.
func ObjectKey(obj gjson.Result, key string) gjson.Result {
	var out gjson.Result
	if !obj.IsObject() {
		return out
	}
	obj.ForEach(func(k, v gjson.Result) bool {
		if k.Str == key {
			out = v
		}
		return true
	})
	return out
}

// Compact returns the JSON text raw without insignificant whitespace, so that tool
// arguments a client sent indented and the same arguments streamed in fragments
// compare equal; raw itself when it has no whitespace or is not valid JSON.
func Compact(raw string) string {
	if !strings.ContainsAny(raw, " \t\r\n") {
		return raw
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	if json.Compact(&b, []byte(raw)) != nil {
		return raw
	}
	return b.String()
}

// Joiner joins texts with "\n" lazily: one text, the usual case, costs nothing.
type Joiner struct {
	first  string
	joined []byte
	n      int
}

// Add appends a text.
func (j *Joiner) Add(s string) {
	switch j.n {
	case 0:
		j.first = s
	case 1:
		j.joined = append(append(append(j.joined, j.first...), '\n'), s...)
	default:
		j.joined = append(append(j.joined, '\n'), s...)
	}
	j.n++
}

// Len is how many texts were added.
func (j *Joiner) Len() int { return j.n }

// String is the texts joined with "\n".
func (j *Joiner) String() string {
	if j.n > 1 {
		return string(j.joined)
	}
	return j.first
}
