package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzClientEvent feeds the client-event parser and the response.create rewrite
// arbitrary messages: neither panics; a message read as a create becomes a valid
// JSON body with "stream": true and no "type", every other top-level field kept; a
// continuation of a response the session knows is expanded, and one it does not
// know is refused with previous_response_not_found.
func FuzzClientEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.create","model":"gpt-5","input":"hi"}`,
		`{"type":"response.create","model":"gpt-5","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"type":"response.create","previous_response_id":"resp_zz","input":[]}`,
		`{"type":"response.create","stream":false,"stream_id":"lane","input":[{"role":"user","content":"a"}]}`,
		`{"type":"response.cancel","response_id":"resp_1"}`,
		`{"type":7}`, `[]`, `"x"`, `{`, `{"type":"response.create","type":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		kind, e := parseClientEvent(msg)
		if e != nil {
			if ev := wsErrorEvent(e); !gjson.ValidBytes(ev) {
				t.Fatalf("error event is not JSON: %s", ev)
			}
			return
		}
		if kind != evCreate {
			return
		}
		w := &wsItems{max: 1 << 20}
		w.add("resp_1", "", [][]byte{[]byte(`{"role":"user","content":"task"}`)}, [][]byte{[]byte(`{"type":"function_call","call_id":"c"}`)})
		ct, e := createBody(msg, w, true, 1<<20)
		if e != nil {
			if !gjson.ValidBytes(wsErrorEvent(e)) {
				t.Fatal("error event is not JSON")
			}
			if ct.prev != "" && ct.prev != "resp_1" && gjson.Get(string(wsErrorEvent(e)), "error.code").Str != "previous_response_not_found" {
				t.Fatalf("unknown previous %q refused with %s", ct.prev, wsErrorEvent(e))
			}
			return
		}
		b := gjson.ParseBytes(ct.body)
		if !gjson.ValidBytes(ct.body) || !b.IsObject() {
			t.Fatalf("body is not a JSON object: %q", ct.body)
		}
		if b.Get("stream").Type != gjson.True || b.Get("type").Exists() || b.Get("stream_id").Exists() {
			t.Fatalf("body %s: want stream true, no type, no stream_id", ct.body)
		}
		if ct.prev == "resp_1" {
			in := b.Get("input").Array()
			if b.Get("previous_response_id").Exists() || len(in) < 2 || in[0].Get("content").Str != "task" {
				t.Fatalf("continuation not expanded: %s", ct.body)
			}
		}
	})
}
