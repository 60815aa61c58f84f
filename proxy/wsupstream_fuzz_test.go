package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol/sse"
)

// FuzzUpstreamEvent: whatever an upstream sends as a message, the event it is relayed
// as reads back, through the SSE reader the decoders use and split at any byte (the
// relay's reads split events), as exactly one event: its name the message's type
// (none when that cannot be an event name), its data the message (line breaks read
// as \n, which JSON takes as the whitespace they were); and the turn ends exactly on
// the mode's last events.
func FuzzUpstreamEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.created","response":{"id":"resp_1"}}`,
		`{"type":"response.output_text.delta","delta":"a\nb"}`,
		`{"type":"response.completed","response":{"id":"resp_1","output":[]}}`,
		`{"type":"error","status":429,"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}`,
		"{\n  \"type\": \"response.failed\"\r\n}",
		`{"type":"bad\nname"}`, `{"type":7}`, `not json`, "", "\r", "\n\n", `{"type":"response.done"}`,
	} {
		f.Add([]byte(s), uint(3))
	}
	f.Fuzz(func(t *testing.T, msg []byte, split uint) {
		typ := eventType(msg)
		if strings.ContainsAny(typ, "\r\n") {
			t.Fatalf("type %q breaks a line", typ)
		}
		frame, last := appendEvent([]byte("x"), msg)
		if frame[0] != 'x' {
			t.Fatal("appendEvent overwrote dst")
		}
		frame = frame[1:]
		if last != lastEvent(typ) {
			t.Fatalf("last %v for type %q", last, typ)
		}
		if v := gjson.GetBytes(msg, "type"); v.Type == gjson.String && v.Str == "response.completed" && !last {
			t.Fatal("response.completed does not end the turn")
		}
		var names, datas []string
		r := sse.Reader{Max: 1 << 20, Event: func(name, data []byte) {
			names, datas = append(names, string(name)), append(datas, string(data))
		}}
		cut := int(split % uint(len(frame)+1))
		_, _ = r.Write(frame[:cut])
		_, _ = r.Write(frame[cut:])
		if len(names) != 1 {
			t.Fatalf("frame %q read as %d events", frame, len(names))
		}
		wantName := typ
		if len(wantName) > 64 {
			wantName = names[0] // the reader keeps a bounded name; the data carries the type
		}
		if names[0] != wantName {
			t.Fatalf("event name %q, want %q", names[0], wantName)
		}
		want := strings.ReplaceAll(strings.ReplaceAll(string(msg), "\r\n", "\n"), "\r", "\n")
		if datas[0] != want {
			t.Fatalf("data %q, want %q", datas[0], want)
		}
		if gjson.ValidBytes(msg) && !bytes.Equal(compact(datas[0]), compact(string(msg))) {
			t.Fatalf("the JSON changed: %q", datas[0])
		}
	})
}

// compact is JSON with its whitespace outside strings removed.
func compact(s string) []byte {
	var b bytes.Buffer
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		b.WriteByte(c)
	}
	return b.Bytes()
}

// FuzzCreateMessage: an agent's body made a response.create is valid JSON when the
// body was a valid object, of type response.create (whatever "type" keys it had),
// without "stream" (however many), every other member kept.
func FuzzCreateMessage(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true,"input":"x"}`, `{}`, ` { "type" : "x" } `, `{"stream":{"a":[1]},"b":2}`, `[1]`, `{`, `{"stream":1,"type":"a","stream":2,"type":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, err := createMessage(body)
		if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if !gjson.ValidBytes(msg) {
			t.Fatalf("%q made invalid %q", body, msg)
		}
		m := gjson.ParseBytes(msg)
		if m.Get("type").String() != "response.create" || m.Get("stream").Exists() {
			t.Fatalf("%q made %q", body, msg)
		}
		seen := map[string]int{}
		gjson.ParseBytes(body).ForEach(func(k, _ gjson.Result) bool { seen[k.Str]++; return true })
		gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
			if seen[k.Str] == 1 && k.Str != "stream" && k.Str != "type" && m.Get(gjson.Escape(k.Str)).Raw != v.Raw {
				t.Fatalf("%q: member %q became %q", body, k.Str, m.Get(gjson.Escape(k.Str)).Raw)
			}
			return true
		})
	})
}
