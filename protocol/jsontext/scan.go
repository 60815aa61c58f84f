package jsontext

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// The fast path of the adapters: one validating pass over a body (Valid), then walks
// of the validated body that skip what they do not need eight bytes at a time
// (SkipString, SkipValue, ResultAt). Request bodies are mostly the text of long
// strings, so string scanning is what costs; it is done a word at a time.

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// hasZero flags (in the high bit of each byte) the zero bytes of w; the lowest flag
// is exact, higher ones may be false positives, so only the first is used.
func hasZero(w uint64) uint64 { return (w - lo8) & ^w & hi8 }

// special flags the bytes of w that end a run of plain string bytes: '"', '\\' and
// the control characters below 0x20.
func special(w uint64) uint64 {
	return hasZero(w^(lo8*'"')) | hasZero(w^(lo8*'\\')) | (w-lo8*0x20)&^w&hi8
}

// quoteOrEscape flags '"' and '\\' only: enough to skip a string already validated.
func quoteOrEscape(w uint64) uint64 {
	return hasZero(w^(lo8*'"')) | hasZero(w^(lo8*'\\'))
}

var isWS = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// SkipWS returns the offset of the first byte at or after i that is not JSON whitespace.
func SkipWS(b []byte, i int) int {
	for i < len(b) && isWS[b[i]] {
		i++
	}
	return i
}

// Valid reports whether b is one JSON document as gjson.ValidBytes accepts it, and
// tooDeep whether it nests deeper than MaxDepth. One pass, no recursion.
func Valid(b []byte) (ok, tooDeep bool) {
	ok, tooDeep, _ = valid(b, nil)
	return ok, tooDeep
}

// A Skipper vouches for values validated before (protocol.Hits): the elements of a
// request's messages array that an agent resends on every call. Skip returns the
// offset after the value that starts at b[i] when its bytes are those of a value that
// was valid JSON and valid UTF-8 at the same depth, else -1; first says that the value
// is the first element of its array. The validator asks it about each element of an
// array that is a member of the top-level object, and nothing else.
type Skipper interface {
	// skip guesses where a value ends in bytes not validated yet (SkipValue).
	Skip(b []byte, i int, first bool, skip func([]byte, int) int) int
}

// valid is Valid that also reports whether the bytes it did not skip are UTF-8 (only
// when ok): the bytes s vouched for are not validated again.
func valid(b []byte, s Skipper) (ok, tooDeep, utf8OK bool) {
	v := validValue(b, SkipWS(b, 0), MaxDepth, s)
	if v.end < 0 {
		return false, v.tooDeep, false
	}
	if SkipWS(b, v.end) != len(b) {
		return false, false, false
	}
	return true, false, v.utf8OK && utf8.Valid(b[v.checked:])
}

// validated is what validValue found of one value.
type validated struct {
	end     int  // the offset after the value; -1 when it is not valid
	tooDeep bool // it nests deeper than its limit
	// utf8OK: the bytes before checked that s did not vouch for are UTF-8; those
	// from checked on are not checked yet.
	utf8OK  bool
	checked int
}

// validValue validates the value that starts at b[i] (or past the end of b),
// nesting at most limit levels: the document's root (valid), or one value of a
// document a decoder validates as it walks it (ValidValue). s is asked about the
// elements of the arrays that are members of the value, when it is an object.
func validValue(b []byte, i, limit int, s Skipper) validated {
	// Bit d of kinds is the kind of the container at depth d+1: set for an object.
	var kinds [MaxDepth/64 + 1]uint64
	depth := 0
	first := false // the value at i is the first element of its array
	utf8OK := true
	checked := 0 // b[:checked] is UTF-8, or utf8OK is false
	bad := validated{end: -1}
	for {
		// A value starts at i.
		if i >= len(b) {
			return bad
		}
		if s != nil && depth == 2 && kinds[0]&3 == 1 { // an element of a top-level member's array
			if end := s.Skip(b, i, first, SkipValue); end >= 0 {
				utf8OK = utf8OK && utf8.Valid(b[checked:i])
				i, checked = end, end
				goto after
			}
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == limit {
				return validated{end: -1, tooDeep: true}
			}
			if c == '{' {
				kinds[depth>>6] |= 1 << (depth & 63)
			} else {
				kinds[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			first = c == '['
			i = SkipWS(b, i+1)
			if i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
				depth--
				i++
				break
			}
			if c == '{' {
				if i = validKey(b, i); i < 0 {
					return bad
				}
			}
			continue
		case '"':
			if i = validString(b, i+1); i < 0 {
				return bad
			}
		case 't':
			if !lit(b, i, "true") {
				return bad
			}
			i += 4
		case 'f':
			if !lit(b, i, "false") {
				return bad
			}
			i += 5
		case 'n':
			if !lit(b, i, "null") {
				return bad
			}
			i += 4
		default:
			if i = validNumber(b, i); i < 0 {
				return bad
			}
		}
		// After a value: close containers, or go on to the next element or member.
	after:
		first = false
		for {
			if depth == 0 {
				return validated{end: i, utf8OK: utf8OK, checked: checked}
			}
			i = SkipWS(b, i)
			if i >= len(b) {
				return bad
			}
			obj := kinds[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			switch b[i] {
			case ',':
				i = SkipWS(b, i+1)
				if obj {
					if i = validKey(b, i); i < 0 {
						return bad
					}
				}
			case '}', ']':
				if (b[i] == '}') != obj {
					return bad
				}
				depth--
				i++
				continue
			default:
				return bad
			}
			break
		}
	}
}

// ValidValue is the offset after the value that starts at b[i] (no leading
// whitespace), inside depth containers of its document, or -1 when it is not valid
// JSON or nests deeper than MaxDepth counted from the document's root. It does not
// check UTF-8: see ValidMembers.
func ValidValue(b []byte, i, depth int) int {
	if i < len(b) {
		switch c := b[i]; {
		case c == '"': // the scalars most members are, without validValue's setup
			return validString(b, i+1)
		case isDigit(c) || c == '-':
			return validNumber(b, i)
		}
	}
	if depth > MaxDepth {
		return -1
	}
	return validValue(b, i, MaxDepth-depth, nil).end
}

// ValidResult is ResultAt for a document not validated yet (see ValidMembers): the
// value at b[i], inside depth containers, as gjson would give it, and the offset
// after it; end -1 when it is not valid. A string is validated and decoded in one
// pass; its UTF-8 is not checked.
func ValidResult(b []byte, js string, i, depth int) (r gjson.Result, end int) {
	if i < len(b) && b[i] == '"' {
		end, esc := validStringEsc(b, i+1)
		if end < 0 {
			return gjson.Result{}, -1
		}
		return stringResult(js, i, end, esc, nil), end
	}
	if end = ValidValue(b, i, depth); end < 0 {
		return gjson.Result{}, -1
	}
	return valueResult(js, i, end), end
}

// ValidMembers is Members for a document not validated yet, which a decoder
// validates as it reads it, in one pass: fn is called with each member's decoded key
// and the offset of its value, which it validates (ValidValue, at the depth of the
// object's members, or its own walk of it) and returns the offset after, or -1 when
// it is not valid. ValidMembers returns the offset after the object at b[i] ('{'),
// or -1 when it is not valid.
//
// The document is valid as Validate has it when its root was read so (ValidValue,
// or ValidMembers on a root object), only whitespace follows the root, and the
// whole of it is UTF-8 (utf8.Valid): the pieces do not check UTF-8, so that a
// document is checked once.
func ValidMembers(b []byte, js string, i int, fn func(key string, v int) int) int {
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		key, v := validMember(b, js, i)
		if v < 0 {
			return -1
		}
		if i = fn(key, v); i < 0 {
			return -1
		}
		var more bool
		if i, more = validNext(b, i, '}'); !more {
			return i
		}
	}
}

// ValidElements is ValidMembers for the elements of the array at b[i] ('['): fn
// validates the element at its offset.
func ValidElements(b []byte, i int, fn func(v int) int) int {
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(b) {
			return -1
		}
		if i = fn(i); i < 0 {
			return -1
		}
		var more bool
		if i, more = validNext(b, i, ']'); !more {
			return i
		}
	}
}

// validMember reads the `"key" :` of the member that starts at b[i] and the
// whitespace after it: the decoded key (which may alias js, the same bytes as b) and
// the offset of the value, or v -1 when it is not valid or no value follows.
func validMember(b []byte, js string, i int) (key string, v int) {
	end, esc, v := validKeyEnd(b, i)
	if v < 0 || v >= len(b) {
		return "", -1
	}
	if esc {
		return Unquote(js[i:end]), v
	}
	return js[i+1 : end-1], v
}

// validNext reads what follows a value that ends at b[i] inside a container that
// close (']' or '}') ends: after a ',', the offset of the next element (or member's
// key), more true; after close, the offset after it, more false; next -1 when
// anything else follows.
func validNext(b []byte, i int, close byte) (next int, more bool) {
	i = SkipWS(b, i)
	switch {
	case i >= len(b):
		return -1, false
	case b[i] == ',':
		return SkipWS(b, i+1), true
	case b[i] == close:
		return i + 1, false
	}
	return -1, false
}

// validKey reads `"key" :` and the whitespace after it: the offset of the value, or -1.
func validKey(b []byte, i int) int {
	_, _, v := validKeyEnd(b, i)
	return v
}

// validKeyEnd is validKey that also returns the offset after the key's closing quote,
// and whether the key holds escapes.
func validKeyEnd(b []byte, i int) (end int, escaped bool, v int) {
	if i >= len(b) || b[i] != '"' {
		return -1, false, -1
	}
	if end, escaped = validStringEsc(b, i+1); end < 0 {
		return -1, false, -1
	}
	v = SkipWS(b, end)
	if v >= len(b) || b[v] != ':' {
		return -1, false, -1
	}
	return end, escaped, SkipWS(b, v+1)
}

func lit(b []byte, i int, s string) bool {
	return len(b)-i >= len(s) && string(b[i:i+len(s)]) == s
}

// validString checks the string whose contents start at i: no control characters,
// only JSON escapes. It returns the offset after the closing quote, or -1.
func validString(b []byte, i int) int {
	end, _ := validStringEsc(b, i)
	return end
}

// validStringEsc is validString that also reports whether the string holds escapes.
func validStringEsc(b []byte, i int) (end int, escaped bool) {
	for {
		for i+8 <= len(b) {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped
		case c < 0x20:
			return -1, false
		case c == '\\':
			if i+1 >= len(b) {
				return -1, false
			}
			escaped = true
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1, false
				}
				i += 6
			default:
				return -1, false
			}
		default:
			i++
		}
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// validNumber checks the number at i as gjson does (JSON's grammar); the offset after
// it, or -1.
func validNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) || !isDigit(b[i]) {
		return -1
	}
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

// SkipString returns the offset after the closing quote of the string whose contents
// start at i, and whether it holds escapes. b must be valid JSON.
//
// A word at a time while the string is plain; from its first escape on, by
// IndexByte to each quote, counting the backslashes before it: tool results that
// carry JSON hold an escape every few bytes, where a scan that stops at each of them
// is slower than the vectorised search.
func SkipString(b []byte, i int) (end int, escaped bool) {
	for i+8 <= len(b) {
		if m := quoteOrEscape(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			i += bits.TrailingZeros64(m) >> 3
			break
		}
		i += 8
	}
	for i < len(b) && b[i] != '"' && b[i] != '\\' {
		i++
	}
	if i >= len(b) {
		return len(b), false
	}
	if b[i] == '"' {
		return i + 1, false
	}
	q := stringEnd(b, i)
	if q == len(b) {
		return len(b), true
	}
	return q + 1, true
}

// SkipValue returns the offset right after the value that starts at i (no leading
// whitespace). b must be valid JSON.
func SkipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := SkipString(b, i+1)
		return end
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = SkipString(b, i+1)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// ResultAt returns the value at offset i of the valid JSON b (js is the same bytes
// as a string, which the result's Raw and Str alias) as gjson would give it, and the
// offset after it. Strings are decoded as gjson decodes them.
func ResultAt(b []byte, js string, i int) (gjson.Result, int) { return ResultIn(b, js, i, nil) }

// ResultIn is ResultAt with strings decoded into a (nil: each its own allocation).
func ResultIn(b []byte, js string, i int, a *Arena) (gjson.Result, int) {
	if b[i] == '"' {
		end, esc := SkipString(b, i+1)
		return stringResult(js, i, end, esc, a), end
	}
	end := SkipValue(b, i)
	return valueResult(js, i, end), end
}

// stringResult is the string js[i:end] (quotes included) as gjson gives it: esc says
// whether it holds escapes, decoded into a (nil: an allocation of its own).
func stringResult(js string, i, end int, esc bool, a *Arena) gjson.Result {
	r := gjson.Result{Type: gjson.String, Raw: js[i:end], Index: i, Str: js[i+1 : end-1]}
	if esc {
		r.Str = a.Unquote(r.Raw)
	}
	return r
}

// valueResult is the value js[i:end], not a string, as gjson gives it.
func valueResult(js string, i, end int) gjson.Result {
	r := gjson.Result{Raw: js[i:end], Index: i}
	switch js[i] {
	case '{', '[':
		r.Type = gjson.JSON
	case 't':
		r.Type = gjson.True
	case 'f':
		r.Type = gjson.False
	case 'n':
		r.Type = gjson.Null
	default:
		r.Type = gjson.Number
		r.Num = number(r.Raw)
	}
	return r
}

// number is strconv.ParseFloat's value of the JSON number raw: a count (up to 15
// digits, exact in a float64) without strconv's general parse.
func number(raw string) float64 {
	if len(raw) > 15 {
		f, _ := strconv.ParseFloat(raw, 64)
		return f
	}
	var n uint64
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			f, _ := strconv.ParseFloat(raw, 64) // a sign, a fraction, an exponent
			return f
		}
		n = n*10 + uint64(c-'0')
	}
	return float64(n)
}

// Arena holds the decoded text of the strings of one body, so that decoding them
// costs one allocation, not one per string. A decoded string is never longer than its
// raw form, so an arena as large as the body never grows (and its strings never move).
type Arena struct{ buf []byte }

// NewArena returns an arena for the strings of a body of n bytes.
func NewArena(n int) *Arena { return &Arena{buf: make([]byte, 0, n)} }

// Unquote is the package's Unquote, decoding into the arena while it has room.
func (a *Arena) Unquote(raw string) string {
	if a == nil {
		return Unquote(raw)
	}
	in := raw[1 : len(raw)-1]
	i := strings.IndexByte(in, '\\')
	if i < 0 {
		return in
	}
	if cap(a.buf)-len(a.buf) < len(in) {
		return unescape(in, i)
	}
	start := len(a.buf)
	a.buf = appendUnescaped(a.buf, in, i)
	d := a.buf[start:]
	return unsafe.String(unsafe.SliceData(d), len(d))
}

// Unquote decodes a raw JSON string (quotes included) as gjson does: without escapes
// it is a substring of raw, no copy.
func Unquote(raw string) string {
	in := raw[1 : len(raw)-1]
	for i := 0; i < len(in); i++ {
		if in[i] == '\\' {
			return unescape(in, i)
		}
	}
	return in
}

// unescape is gjson's unescape of s, whose first escape is at i: the same text, byte
// for byte (a surrogate escape takes the next \u escape as its pair, whatever it is;
// an unpaired one becomes U+FFFD).
func unescape(s string, i int) string {
	return string(appendUnescaped(make([]byte, 0, len(s)), s, i))
}

// appendUnescaped appends the decoded s (first escape at i) to out.
func appendUnescaped(out []byte, s string, i int) []byte {
	out = append(out, s[:i]...)
	for i < len(s) {
		if s[i] != '\\' {
			// Plain bytes up to the next escape. A control character ends the text in
			// gjson; a valid string has none, so look for one only within the run.
			j := strings.IndexByte(s[i:], '\\')
			if j < 0 {
				j = len(s) - i
			}
			run := s[i : i+j]
			if k := controlAt(run); k >= 0 {
				return append(out, run[:k]...)
			}
			out = append(out, run...)
			i += j
			continue
		}
		i++
		if i >= len(s) {
			return out
		}
		switch s[i] {
		case '\\':
			out = append(out, '\\')
		case '/':
			out = append(out, '/')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case '"':
			out = append(out, '"')
		case 'u':
			if i+5 > len(s) {
				return out
			}
			r := hex4(s[i+1 : i+5])
			i += 5
			if utf16.IsSurrogate(r) && len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
				r = utf16.DecodeRune(r, hex4(s[i+2:i+6]))
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return out
		}
		i++
	}
	return out
}

// controlAt is the offset of the first control character (below 0x20) of s, or -1;
// eight bytes at a time.
func controlAt(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64((*[8]byte)(unsafe.Pointer(unsafe.StringData(s[i:])))[:])
		if m := (w - lo8*0x20) &^ w & hi8; m != 0 { // the lowest flag is exact (see hasZero)
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if s[i] < ' ' {
			return i
		}
	}
	return -1
}

// Members calls fn for each member of the object at b[i] ('{') of the valid JSON b
// (js: the same bytes as a string), in order, with its decoded key and the offset of
// its value; fn returns the offset after the value, or -1 to have it skipped. Members
// returns the offset after the object.
func Members(b []byte, js string, i int, fn func(key string, v int) int) int {
	i = SkipWS(b, i+1)
	if b[i] == '}' {
		return i + 1
	}
	for {
		kEnd, esc := SkipString(b, i+1)
		key := js[i+1 : kEnd-1]
		if esc {
			key = Unquote(js[i:kEnd])
		}
		v := SkipWS(b, SkipWS(b, kEnd)+1) // past the ':'
		end := fn(key, v)
		if end < 0 {
			end = SkipValue(b, v)
		}
		i = SkipWS(b, end)
		if b[i] == '}' {
			return i + 1
		}
		i = SkipWS(b, i+1) // past the ','
	}
}

// Elements calls fn with the offset of each element of the array at b[i] ('[') of
// the valid JSON b; fn returns the offset after the element, or -1 to have it
// skipped. Elements returns the offset after the array.
func Elements(b []byte, i int, fn func(v int) int) int {
	i = SkipWS(b, i+1)
	if b[i] == ']' {
		return i + 1
	}
	for {
		end := fn(i)
		if end < 0 {
			end = SkipValue(b, i)
		}
		i = SkipWS(b, end)
		if b[i] == ']' {
			return i + 1
		}
		i = SkipWS(b, i+1)
	}
}

// ReadElements reads the elements of the array at b[open] of the valid b through a
// call's memo (protocol.Hits.Next): those it vouched for during validation are taken
// as remembered, the others read and remembered. It returns the offset after the
// array; hits.Walked holds the elements.
func ReadElements[V any](b []byte, open int, hits *protocol.Hits[V], read func(s string) V) int {
	hits.Begin()
	return Elements(b, open, func(v int) int { return hits.Next(b, v, SkipValue, read) })
}

// CloneString returns the decoded string at b[v] of the valid b (js: the same bytes
// as a string), copied so that it outlives b, or "" when the value is not a string;
// and the offset after the value.
func CloneString(b []byte, js string, v int) (string, int) {
	if b[v] != '"' {
		return "", SkipValue(b, v)
	}
	end, esc := SkipString(b, v+1)
	if esc {
		return Unquote(js[v:end]), end // unescaping copies
	}
	return strings.Clone(js[v+1 : end-1]), end
}

// DetachAt returns the value at b[v] of the valid b as protocol.Detach gives it (read
// from a copy of its bytes, at its offset in b), and the offset after it: for the few
// values of a body that a view keeps and no memo holds (a system prompt).
func DetachAt(b []byte, js string, v int) (gjson.Result, int) {
	end := SkipValue(b, v)
	return protocol.Detach(gjson.Result{Type: gjson.JSON, Raw: js[v:end], Index: v}), end
}

// ReadUsage is k.Read of the usage value at b[v] of the valid b (js: the same bytes as
// a string), walked here rather than by gjson: only the counts' members become
// values, the rest (the nested details objects) are skipped a word at a time. It
// returns the offset after the value.
func ReadUsage(b []byte, js string, v int, k protocol.UsageKeys) (protocol.Usage, int) {
	var u protocol.Usage
	if b[v] != '{' {
		return u, SkipValue(b, v)
	}
	end := Members(b, js, v, func(key string, n int) int {
		if !k.Counts(key) {
			return -1
		}
		r, end := ResultAt(b, js, n)
		k.Set(&u, key, r)
		return end
	})
	return u, end
}
