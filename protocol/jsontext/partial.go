package jsontext

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Reading a member out of part of a JSON text: the head or the tail of an event too
// large to hold (see sse.Cut), where the fields that name it (type, id) come first
// and its totals (usage) last. The bytes are untrusted and cut anywhere: nothing
// here reads past them, and a value is returned only when it lies whole in them and
// is valid.

// HeadMember returns the value at path (object keys from the root) of a JSON text of
// which b holds only the first bytes: found when it lies whole in b, after members
// that do; else the zero Result. Keys are compared decoded; the first match at each
// level is taken, as gjson does. The result does not alias b.
func HeadMember(b []byte, path ...string) gjson.Result {
	i := SkipWS(b, 0)
	for _, key := range path {
		if i >= len(b) || b[i] != '{' {
			return gjson.Result{}
		}
		i = SkipWS(b, i+1)
		for {
			if i >= len(b) || b[i] != '"' {
				return gjson.Result{}
			}
			end := stringEnd(b, i+1)
			if end >= len(b) {
				return gjson.Result{}
			}
			k := b[i+1 : end]
			if i = SkipWS(b, end+1); i >= len(b) || b[i] != ':' {
				return gjson.Result{}
			}
			i = SkipWS(b, i+1)
			if keyIs(k, key) {
				break
			}
			if i = skipPartial(b, i); i < 0 {
				return gjson.Result{}
			}
			if i = SkipWS(b, i); i >= len(b) || b[i] != ',' {
				return gjson.Result{} // the object ended without the key, or is not one
			}
			i = SkipWS(b, i+1)
		}
	}
	return valueAt(b, i)
}

// TailMember returns the value of the last member named key of an object depth levels
// deep (the root's members are at depth 1) in a JSON text of which b holds only the
// last bytes; else the zero Result. The text's end closes every level it opened, so
// walking back from it tells each byte's depth; and strings apart, since inside a
// string every quote is escaped. The result does not alias b.
func TailMember(b []byte, depth int, key string) gjson.Result {
	d := 0
	for i := len(b) - 1; i >= 0; i-- {
		switch b[i] {
		case '}', ']':
			d++
		case '{', '[':
			if d--; d < 0 {
				return gjson.Result{} // not the end of a JSON text
			}
		case '"':
			open := stringStart(b, i)
			if open < 0 {
				return gjson.Result{} // b begins inside this string
			}
			if d == depth {
				if j := SkipWS(b, i+1); j < len(b) && b[j] == ':' && keyIs(b[open+1:i], key) {
					return valueAt(b, SkipWS(b, j+1))
				}
			}
			i = open
		}
	}
	return gjson.Result{}
}

// valueAt returns the value at b[i] when it ends within b and is valid JSON.
func valueAt(b []byte, i int) gjson.Result {
	end := skipPartial(b, i)
	if end < 0 || Validate(b[i:end]) != nil {
		return gjson.Result{}
	}
	return gjson.ParseBytes(b[i:end]) // a copy: the result outlives b
}

// keyIs reports whether the raw contents of a JSON string (no quotes) decode to key.
func keyIs(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return Unquote(string(q)) == key
}

// skipPartial returns the offset after the value that starts at b[i] (no leading
// whitespace), or -1 when it does not end within b. It checks the nesting and the
// strings, not the rest: the value is validated once found.
func skipPartial(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		if end := stringEnd(b, i+1); end < len(b) {
			return end + 1
		}
		return -1
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = stringEnd(b, i+1); i >= len(b) {
					return -1
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	// A number or literal ends at a delimiter: at the end of b it may go on past it.
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
	}
	return -1
}

// stringStart returns the offset of the quote that opens the string whose closing
// quote is at b[end], or -1 when it is not in b: a quote is a string's delimiter when
// an even number of backslashes precede it, which b must show whole.
func stringStart(b []byte, end int) int {
	for j := end; ; {
		j = bytes.LastIndexByte(b[:j], '"')
		if j < 0 {
			return -1
		}
		k := j - 1
		for k >= 0 && b[k] == '\\' {
			k--
		}
		if k < 0 {
			return -1 // what precedes the backslashes (or the quote) is cut off
		}
		if (j-1-k)%2 == 0 {
			return j
		}
	}
}
