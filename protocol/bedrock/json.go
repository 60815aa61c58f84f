package bedrock

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// rootObject validates body and returns it as a gjson value over one copy of the
// body (every string of a view aliases that copy, so the view outlives the caller's
// buffer). A body that is JSON but not an object has no messages.
func rootObject(body []byte) (gjson.Result, error) {
	if err := jsontext.Validate(body); err != nil {
		return gjson.Result{}, err
	}
	js := string(body)
	if jsontext.FirstByte(js) != '{' {
		return gjson.Result{}, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	return gjson.Result{Type: gjson.JSON, Raw: js}, nil
}

// objectKey returns the value of key in obj; the last one on duplicate keys, as in
// the decoders upstream.
func objectKey(obj gjson.Result, key string) gjson.Result {
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

// compact returns the JSON text raw (valid JSON) without the whitespace between its
// tokens: the form a tool call's arguments take in the normalised messages, so that
// a request and the answer that made it agree whatever the spacing.
func compact(raw string) string {
	if !strings.ContainsAny(raw, " \t\r\n") {
		return raw
	}
	var b strings.Builder
	b.Grow(len(raw))
	in, esc := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case in:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				in = false
			}
		case c == '"':
			in = true
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// joiner joins texts with "\n" without allocating for the usual single text.
type joiner struct {
	first  string
	joined []byte
	n      int
}

func (j *joiner) add(s string) {
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

func (j *joiner) String() string {
	if j.n > 1 {
		return string(j.joined)
	}
	return j.first
}
