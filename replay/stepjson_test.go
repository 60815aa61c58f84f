package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// marshalStep is a step as encoding/json writes it, HTML left as it is.
func marshalStep(t testing.TB, s *StepEvent) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// TestAppendStepIsJSONMarshal: the recorder's hand-written step line is byte for
// byte what encoding/json writes (HTML unescaped), and decodes to the same event.
func TestAppendStepIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	resp := protocol.Message{Role: "assistant", Content: "ok <b>&</b> \u2028 é", ToolCalls: []protocol.ToolCall{
		{ID: "c1", Type: "custom", Name: "apply_patch", Arguments: "*** Begin Patch\n"},
		{ID: "c2", Type: "function", Name: "f", Arguments: `{"a":"<x>"}`}},
		Raw: []protocol.RawJSON{`{"type":"reasoning","summary":[]}`}}
	steps := []*StepEvent{
		{V: 1, Type: TypeStep, ID: "s1", EpisodeID: "ep", Experiment: "support", Turn: 3, Messages: []protocol.Message{
			{Role: "user", Content: "look", Parts: []protocol.Part{{Type: "text", Text: "look"},
				{Type: "image_url", Media: &protocol.Media{SHA256: "ab", MediaType: "image/png"}}}},
			{Role: "tool", Content: "\x01\"\\", ToolCallID: "c0", Name: "n"}},
			Response: &resp, AnswerTruncatedBytes: 7340032, Usage: protocol.Usage{InputTokens: 4000, OutputTokens: 60},
			Timing: Timing{Augment: 0.01, UpstreamTTFB: 1234.567, Total: 1e-7}, Status: 200, At: at},
		{V: 1, Type: TypeStep, ID: "s2", EpisodeID: "ep", Messages: []protocol.Message{}, Status: 502,
			Error: "upstream <down>", Timing: Timing{Total: 1e21}, At: at.UTC(), Transport: episode.TransportWebSocket},
		{V: 1, Type: TypeStep, ID: "s3", EpisodeID: "ep", Timing: Timing{Augment: 3e-9, Total: 123456789.125}},
	}
	for _, s := range steps {
		got := appendStep(nil, s)
		if want := marshalStep(t, s); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
		ev, err := Decode(got)
		if err != nil {
			t.Fatal(err)
		}
		back := ev.(*StepEvent)
		if back.ID != s.ID || len(back.Messages) != len(s.Messages) || back.Error != s.Error || !back.At.Equal(s.At) ||
			back.AnswerTruncatedBytes != s.AnswerTruncatedBytes || back.Transport != s.Transport || back.Experiment != s.Experiment {
			t.Errorf("decoded %+v", back)
		}
		if s.Response != nil && !reflect.DeepEqual(back.Response.ToolCalls, s.Response.ToolCalls) {
			t.Errorf("response %+v", back.Response)
		}
	}
	if string(appendFloat(nil, math.NaN())) != "0" {
		t.Error("NaN")
	}
}

func FuzzAppendStep(f *testing.F) {
	f.Add("user", "hé <x> \u2028", "c", "apply_patch", "*** x", 0.5, 12.25, int64(3))
	f.Add("", "\xff\x00", "", "", "{}", 1e-7, 1e22, int64(-1))
	f.Fuzz(func(t *testing.T, role, content, id, name, args string, a, b float64, n int64) {
		if math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
			return // encoding/json refuses them; appendStep writes 0
		}
		s := &StepEvent{V: 1, Type: TypeStep, ID: id, EpisodeID: "ep", Experiment: name, Turn: int(n % 1000),
			Messages: []protocol.Message{{Role: role, Content: content, ToolCalls: []protocol.ToolCall{{ID: id, Type: "custom", Name: name, Arguments: args}}}},
			Usage:    protocol.Usage{InputTokens: n}, Timing: Timing{Augment: a, Total: b}, Error: content, At: time.Unix(n%1e9, 0).UTC(), Transport: name}
		if got, want := appendStep(nil, s), marshalStep(t, s); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestEncodeStepAllocatesTheLineOnce: a step's line is written into one buffer sized
// from its messages, not grown from a guess by doubling (which, for a first turn's
// system prompt, was most of the recorder's cost per step).
func TestEncodeStepAllocatesTheLineOnce(t *testing.T) {
	long := strings.Repeat("Agent policy: \"book\" flights\tonly after the user confirms.\n", 200)
	s := &StepEvent{V: Version, Type: TypeStep, ID: "0123456789abcdef0123", EpisodeID: "ep_1", Messages: []protocol.Message{
		{Role: "system", Content: long}, {Role: "user", Content: "Change my flight to May 20."},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_1", Type: "function", Name: "get", Arguments: `{"id":"4WQ150"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: strings.Repeat(`{"flight": "HAT136", "date": "2024-05-20"}`, 50)}},
		Response: &protocol.Message{Role: "assistant", Content: "Done."}, Status: 200, At: time.Unix(0, 0).UTC()}
	r := &Recorder{}
	line, err := r.encode(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := marshalStep(t, s); !bytes.Equal(line, want) {
		t.Fatalf("\n got %s\nwant %s", line, want)
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = r.encode(nil, s) }); n > 1 {
		t.Fatalf("encoding a %d-byte step allocated %.0f times, want once", len(line), n)
	}
}

// TestAppendEpisodeIsJSONMarshal: the recorder's hand-written episode line is byte
// for byte what json.Marshal writes, HTML escaped as episode lines always were, and a
// start time encoding/json refuses is refused too.
func TestAppendEpisodeIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	eps := []*EpisodeEvent{
		{V: 1, Type: TypeEpisode, ID: "e1", EpisodeID: "ep_1", TaskID: "t", Task: "book <a> flight & \"more\"\n\u2028 é \xff",
			Experiment: "support", Arm: "cam", Context: "<context>tips & tricks</context>\t\x01", ContextSource: "hit",
			Protocol: "openai", Model: "gpt-4o", StartedAt: at},
		{V: 1, Type: TypeEpisode, ID: "e2", EpisodeID: "ep_2", StartedAt: at.UTC()},
		{V: 1, Type: TypeEpisode, ID: "e3", EpisodeID: "ep_3"}, // the zero time
		{V: 1, Type: TypeEpisode, ID: "e4", EpisodeID: "ep_4", StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("W", -(9*3600+30*60)))},
	}
	for _, e := range eps {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendEpisode([]byte("prefix"), e)
		if err != nil || string(got) != "prefix"+string(want) {
			t.Errorf("\n got %s (%v)\nwant prefix%s", got, err, want)
		}
	}
	for _, bad := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("farther", -100*3600)),
	} {
		e := &EpisodeEvent{V: 1, Type: TypeEpisode, ID: "e", EpisodeID: "ep", StartedAt: bad}
		_, jerr := json.Marshal(e)
		if _, err := appendEpisode(nil, e); (err == nil) != (jerr == nil) {
			t.Errorf("%v: appendEpisode err %v, json.Marshal err %v", bad, err, jerr)
		}
		if _, err := (&Recorder{}).encode(nil, e); (err == nil) != (jerr == nil) {
			t.Errorf("%v: encode err %v, json.Marshal err %v", bad, err, jerr)
		}
	}
}

func FuzzAppendEpisode(f *testing.F) {
	f.Add("book <a> & b", "ctx \u2028 é", "support", int64(1764000000), 3600)
	f.Add("\xff\x00\"\\", "", "", int64(-62135596800), -86399)
	f.Fuzz(func(t *testing.T, task, ctx, experiment string, sec int64, zone int) {
		e := &EpisodeEvent{V: 1, Type: TypeEpisode, ID: "e", EpisodeID: "ep", TaskID: experiment, Task: task, Experiment: experiment,
			Arm: task, Context: ctx, ContextSource: ctx, Protocol: "openai", Model: experiment,
			StartedAt: time.Unix(sec, int64(zone)&0x3fffffff).In(time.FixedZone("z", zone%(200*3600)))}
		want, jerr := json.Marshal(e)
		got, err := appendEpisode(nil, e)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("appendEpisode err %v, json.Marshal err %v", err, jerr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestAppendFloatMillis: appendFloat's fast path for timings (milliseconds to the
// microsecond) writes what encoding/json writes, and so does its fallback for the
// values it does not take.
func TestAppendFloatMillis(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat([]byte("x"), f); string(got) != "x"+string(want) {
			t.Fatalf("appendFloat(%v) = %s, want x%s", f, got, want)
		}
	}
	for n := int64(-30000); n <= 30000; n++ {
		check(float64(n) / 1e3)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 30000 {
		n := rng.Int64N(2e15) - 1e15
		check(float64(n) / 1e3)
		check(float64(n>>rng.IntN(50)) / 1e3)
		check(ms(time.Duration(rng.Int64())))
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1e-7, 1e-6, 0.0001, 0.0005, 1234.5678, 1e12, 999999999999.999, 1e15, -1e15, 1e21, 1e22, 5e-324, math.MaxFloat64} {
		check(f)
	}
}
