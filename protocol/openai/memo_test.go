package openai

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

const tauPath = "../../../shared/data/tau-bench/gpt-4o-airline.json"

// sameParse fails unless body reads from the memo as it reads afresh.
func sameParse(t *testing.T, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	parse := func(b []byte) (*Request, error) { return Parse(b, rules) }
	memotest.Same(t, body, parse, memotest.Fresh(&memo, parse))
}

// TestMemoMatchesFresh: every turn of the real tau-bench trajectories, each sent as
// the agent sends it (the whole history again), reads from the memo exactly as it
// reads afresh — and so does every edge case.
func TestMemoMatchesFresh(t *testing.T) {
	raw, err := os.ReadFile(tauPath)
	if os.IsNotExist(err) {
		t.Skipf("%s absent", tauPath)
	}
	if err != nil {
		t.Fatal(err)
	}
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`user_id is (\w+)`)}, {FirstUserMessage: true}}
	for k, run := range gjson.ParseBytes(raw).Array() {
		if k%8 != 0 { // 25 runs of 200: the rest adds time, not cases
			continue
		}
		msgs := run.Get("traj").Array()
		for n := 1; n <= len(msgs); n++ {
			var b bytes.Buffer
			b.WriteString(`{"model":"gpt-4o","messages":[`)
			for i, m := range msgs[:n] {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(m.Raw) // as recorded: indented, escapes as sent
			}
			b.WriteString(`]}`)
			sameParse(t, b.Bytes(), rules)
		}
	}
}

func TestMemoEdgeCases(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	bodies := []string{
		// The same message at another place: offsets move, the message does not.
		`{"messages":[{"role":"user","content":"Task: a"}]}`,
		`{"model":"m","messages":[ {"role":"system","content":"s"}, {"role":"user","content":"Task: a"}]}`,
		`{"messages":[{"role":"user","content":"Task: a"},{"role":"user","content":"Task: a"}]}`,
		// System first, then not first: its anchor is only used in front.
		`{"messages":[{"role":"system","content":[{"type":"text","text":"s"}]},{"role":"system","content":[]}]}`,
		`{"messages":[{"role":"system","content":[]},{"role":"system","content":[{"type":"text","text":"s"}]}]}`,
		// Volatile parts and envelopes: read as sent; stitching normalises them.
		`{"messages":[{"role":"user","content":"<system-reminder>x</system-reminder>On 2025-01-02 in /home/a/b fix it"}]}`,
		// Media parts, escapes, a refusal and reasoning.
		`{"messages":[{"role":"user","content":[{"type":"text","text":"T\u00e9sk \"q\""},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}},{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]},` +
			`{"role":"assistant","content":null,"refusal":"no","reasoning_content":"r","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\": 1}"}}]}]}`,
		// Elements that are not messages, duplicate keys, a duplicate messages array.
		`{"messages":[1,"x",null,{"role":"user","role":"tool","content":"y"}]}`,
		`{"messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"second"}]}`,
		`{"messages":[]}`, `{"messages":{}}`,
	}
	for range 2 { // the second time, every element is a hit
		for _, b := range bodies {
			sameParse(t, []byte(b), rules)
		}
	}
}

// TestMemoDoesNotAliasBody: the server reuses a request's buffer; a view read from it
// (afresh, then from the memo) must not change when it is overwritten.
func TestMemoDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"sys"},{"role":"user","content":"Fix the bug"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`)
	want, err := Parse(bytes.Clone(body), protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		buf := bytes.Clone(body)
		r, err := Parse(buf, protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 'x'
		}
		if !reflect.DeepEqual(r.Messages, want.Messages) || r.Model != "gpt-4o" || r.Task != "Fix the bug" {
			t.Fatalf("the view changed with the body's buffer:\n got %+v\nwant %+v", r, want)
		}
	}
}

// FuzzMemoMatchesFresh: any body reads from the memo as it reads afresh, the first
// time and the second.
func FuzzMemoMatchesFresh(f *testing.F) {
	for _, b := range referenceBodies(f) {
		f.Add([]byte(b))
	}
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameParse(t, body, rules)
		sameParse(t, body, rules)
	})
}

// skipPairs are bodies read one after the other: the first leaves its elements in
// the memo, the second holds their bytes where they are not the same element, or
// where the body around them is not valid.
var skipPairs = [][2]string{
	// A remembered number is the prefix of a longer one; a string of a longer one.
	{`{"messages":[1234567890123456789012345678901234567890123456789012345678901234567890]}`,
		`{"messages":[12345678901234567890123456789012345678901234567890123456789012345678901]}`},
	{`{"messages":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}`,
		`{"messages":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]"]}`},
	// A remembered message inside a string, followed by what ends an element.
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"messages":["{\"role\":\"user\",\"content\":\"Task: the remembered message, long enough to be indexed\"}",{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`},
	// Remembered messages in a body that is not valid around them.
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]`},
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}x]}`},
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"},]}`},
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"model":"` + "\xff" + `","messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`},
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]`},
	{`{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}`,
		`{"m":{"messages":[{"role":"user","content":"Task: the remembered message, long enough to be indexed"}]}}`},
	// A history resent (taken from the run the first body left) where it was edited,
	// cut, or is no longer valid between or after its elements.
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"edited"},{"role":"user","content":"Task: two"}]}`},
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"} , {"role":"assistant","content":"done"}]}`},
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},,{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`},
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}`},
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"assistant","content":"done"}x{"role":"user","content":"Task: two"}]}`},
	// Another order, a repeat, whitespace around them.
	{`{"messages":[{"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"user","content":"Task: two"}]}`,
		`{"messages":[ {"role":"user","content":"Task: two"} , {"role":"system","content":"a system prompt long enough to be indexed by its prefix ok"},{"role":"user","content":"Task: one"},{"role":"user","content":"Task: one"}]}`},
}

// TestSkipKnownElements: a body whose elements the memo holds reads as it reads
// afresh, and an invalid one is refused with the same error as afresh.
func TestSkipKnownElements(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	for _, p := range skipPairs {
		for range 2 {
			_, _ = Parse([]byte(p[0]), rules)
		}
		sameParse(t, []byte(p[1]), rules)
		_, err := Parse([]byte(p[1]), rules)
		saved := memo
		memo = protocol.NewMemo[*element](0)
		_, want := Parse([]byte(p[1]), rules)
		memo = saved
		if fmt.Sprint(err) != fmt.Sprint(want) {
			t.Errorf("%s: error %v, afresh %v", p[1], err, want)
		}
	}
}

// FuzzSkipMatchesScan: whatever the memo holds from one body, another reads as it
// reads afresh (the elements the memo vouches for are skipped, the rest scanned).
func FuzzSkipMatchesScan(f *testing.F) {
	for _, p := range skipPairs {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	for _, b := range referenceBodies(f) {
		f.Add([]byte(b), []byte(b))
	}
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	f.Fuzz(func(t *testing.T, prime, body []byte) {
		_, _ = Parse(prime, rules)
		sameParse(t, body, rules)
	})
}

// TestSpliceTo: SpliceTo appends to dst, keeping what dst held, for every placement.
func TestSpliceTo(t *testing.T) {
	for _, b := range referenceBodies(t) {
		r, err := Parse([]byte(b), protocol.DefaultTaskRules())
		if err != nil {
			continue
		}
		for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.System, protocol.NewMessage, "unknown"} {
			want := append([]byte("dst:"), r.SpliceTo(nil, []byte(b), p, "\n\nctx \"q\"")...)
			if got := r.SpliceTo([]byte("dst:"), []byte(b), p, "\n\nctx \"q\""); !bytes.Equal(got, want) {
				t.Fatalf("%s %s:\n got %s\nwant %s", b, p, got, want)
			}
		}
	}
}
