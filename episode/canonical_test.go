package episode

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol/jsontext"
)

// canonicalReference is the canonical spelling of tool arguments by gjson's walk, as
// the digest read them before canonicalJSON walked the bytes itself: a digest is a
// stored tip, so the two must agree byte for byte. nil: not JSON (hashed as text).
func canonicalReference(args string) []byte {
	if args == "" || !gjson.Valid(args) {
		return nil
	}
	return canonicalGJSON(nil, gjson.Parse(args))
}

func canonicalGJSON(dst []byte, v gjson.Result) []byte {
	switch {
	case v.IsObject():
		type kv struct {
			k string
			v gjson.Result
		}
		var kvs []kv
		v.ForEach(func(k, val gjson.Result) bool { kvs = append(kvs, kv{k.Str, val}); return true })
		slices.SortStableFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		dst = append(dst, '{')
		for i, e := range kvs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuote(dst, e.k)
			dst = append(dst, ':')
			dst = canonicalGJSON(dst, e.v)
		}
		return append(dst, '}')
	case v.IsArray():
		dst = append(dst, '[')
		first := true
		v.ForEach(func(_, val gjson.Result) bool {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = canonicalGJSON(dst, val)
			return true
		})
		return append(dst, ']')
	case v.Type == gjson.String:
		return strconv.AppendQuote(dst, v.Str)
	case v.Type == gjson.Number:
		return strconv.AppendFloat(dst, v.Num, 'g', -1, 64)
	}
	return append(dst, v.Raw...)
}

// canonicalOf is what writeArguments hashes of args as JSON; nil when it hashes it as
// text.
func canonicalOf(args string) []byte {
	b := unsafe.Slice(unsafe.StringData(args), len(args))
	if args == "" || !jsonArguments(b, args) {
		return nil
	}
	out, end := canonicalJSON(nil, b, args, jsontext.SkipWS(b, 0))
	if jsontext.SkipWS(b, end) != len(b) {
		return []byte("canonicalJSON ended before the value did")
	}
	return out
}

var argumentSeeds = []string{
	`{"city":"Zürich","n":1.0}`, `{"n":1,"city":"Z\u00fcrich"}`, `{"h":"\u003cb\u003e","p":"a\/b"}`,
	`{ "b" : null , "a" : [ 1.0 , { "x" : true , "y" : 2 } ] }`, `{"a":1,"a":2,"A":0,"":[]}`,
	`{"reservation_id":"4WQ150","user_id":"mia_li_3668","flights":[{"date":"2024-05-20","flight_number":"HAT136"}]}`,
	`{"k\u00e9y":"\ud83d\ude00\ud800","t":"tab\there\n","e":1e400,"m":-0,"f":1.5e-7}`,
	` [1, "two", false, null, {}] `, `"just a string"`, `12.50`, `true`, `not json`, `{"a":}`, ``, `{"z":1,"y":2,"x":3,"w":4,"v":5,"u":6,"t":7,"s":8,"r":9,"q":10}`,
}

// TestCanonicalJSONMatchesReference: the spelling of every seed is gjson's.
func TestCanonicalJSONMatchesReference(t *testing.T) {
	for _, s := range argumentSeeds {
		if got, want := canonicalOf(s), canonicalReference(s); !bytes.Equal(got, want) {
			t.Errorf("canonical(%s) = %s, want %s", s, got, want)
		}
	}
}

// FuzzCanonicalJSON: on any text, writeArguments hashes what it hashed by gjson's
// walk: the same canonical spelling of JSON, and text that is not JSON as text.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range argumentSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > jsontext.MaxDepth {
			return // gjson itself recurses on deep input
		}
		if got, want := canonicalOf(s), canonicalReference(s); !bytes.Equal(got, want) {
			t.Fatalf("canonical(%q) = %q, want %q", s, got, want)
		}
	})
}

// TestCanonicalJSONDeep: arguments nested deeper than jsontext.MaxDepth are JSON to
// gjson.Valid (the reference, and what stored tips were hashed with) while
// jsontext.Valid reports them too deep: they are still canonicalised, not hashed as text.
func TestCanonicalJSONDeep(t *testing.T) {
	d := jsontext.MaxDepth + 1
	args := `{"a":` + strings.Repeat("[", d) + strings.Repeat("]", d) + `}`
	if got, want := canonicalOf(args), canonicalReference(args); !bytes.Equal(got, want) {
		t.Fatalf("canonical of %d-deep arguments: got %d bytes (nil: hashed as text), want %d", d, len(got), len(want))
	}
}
