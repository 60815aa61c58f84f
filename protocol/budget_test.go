package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBudget(t *testing.T) {
	type step struct {
		op   string // append, set, clone, take
		s    string
		want string // the field after the step (append, set), or what clone returns
		ok   bool   // take's and swap's answer
	}
	tests := []struct {
		name      string
		limit     int
		steps     []step
		truncated int64
	}{
		{"within", 10, []step{{op: "append", s: "hello", want: "hello"}, {op: "append", s: "world", want: "helloworld"}}, 0},
		{"cut then nothing more", 8, []step{{op: "append", s: "hello", want: "hello"}, {op: "append", s: "world", want: "hellowor"},
			{op: "append", s: "!", want: "hellowor"}, {op: "clone", s: "id", want: ""}}, 5},
		{"never half a character", 4, []step{{op: "append", s: "ab€", want: "ab"}}, 3},
		{"set gives its bytes back", 6, []step{{op: "append", s: "abcd", want: "abcd"}, {op: "set", s: "abcdef", want: "abcdef"}}, 0},
		{"set after a cut keeps the prefix", 3, []step{{op: "append", s: "abcd", want: "abc"}, {op: "set", s: "abcdef", want: "abc"}}, 1},
		{"clone whole or nothing", 5, []step{{op: "clone", s: "call_1", want: ""}, {op: "append", s: "x", want: ""}}, 7},
		{"take past the limit cuts", 10, []step{{op: "take", s: "12345678", ok: true}, {op: "take", s: "12345678", ok: false},
			{op: "append", s: "x", want: ""}}, 1},
		{"swap in a whole item", 10, []step{{op: "append", s: "abcdef", want: "abcdef"}, {op: "swap", s: "0123456789", ok: true}}, 0},
		{"swap that does not fit", 10, []step{{op: "append", s: "abcdef", want: "abcdef"}, {op: "swap", s: "0123456789a", ok: false}}, 11},
		{"zero is the default", 0, []step{{op: "append", s: strings.Repeat("a", DefaultMaxAnswer+3), want: strings.Repeat("a", DefaultMaxAnswer)}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Budget
			b.Limit(tt.limit)
			var field []byte
			for i, st := range tt.steps {
				switch st.op {
				case "append":
					field = b.Append(field, st.s)
				case "set":
					field = b.Set(field, st.s)
				case "clone":
					if got := b.Clone(st.s); got != st.want {
						t.Fatalf("step %d: Clone = %q, want %q", i, got, st.want)
					}
					continue
				case "take":
					if got := b.Take(len(st.s)); got != st.ok {
						t.Fatalf("step %d: Take = %v, want %v", i, got, st.ok)
					}
					continue
				case "swap":
					got, ok := b.Swap(len(field), st.s)
					if ok != st.ok || ok && got != st.s {
						t.Fatalf("step %d: Swap = %q, %v; want %v", i, got, ok, st.ok)
					}
					continue
				}
				if string(field) != st.want {
					t.Fatalf("step %d: field %q, want %q", i, field, st.want)
				}
				if limit := max(tt.limit, 0); limit > 0 && cap(field) > limit {
					t.Fatalf("step %d: cap %d past the limit %d", i, cap(field), limit)
				}
			}
			if got := b.Truncated(); got != tt.truncated {
				t.Fatalf("Truncated = %d, want %d", got, tt.truncated)
			}
		})
	}
}

func TestBudgetTrim(t *testing.T) {
	m := Message{Role: "assistant", Content: "0123456789€",
		ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}},
		Raw:       []RawJSON{`{"type":"thinking"}`}}
	whole := m
	whole.ToolCalls = append([]ToolCall(nil), m.ToolCalls...)
	var fits Budget
	fits.Limit(answerBytes(&m))
	if sk := fits.Trim(&whole); sk != nil || fits.Truncated() != 0 {
		t.Fatalf("a message that fits: sketch %v, truncated %d", sk, fits.Truncated())
	}
	var wholeSketch Sketch
	wholeSketch.Of(&whole)
	var b Budget
	b.Limit(12)
	sk := b.Trim(&m)
	if sk == nil || sk.Sum64() != wholeSketch.Sum64() {
		t.Fatal("a cut message: no sketch, or not the whole message's")
	}
	if m.Content != "0123456789" || !utf8.ValidString(m.Content) {
		t.Fatalf("content %q", m.Content)
	}
	if m.ToolCalls[0].ID != "" || m.ToolCalls[0].Arguments != "" || m.Raw != nil {
		t.Fatalf("past the cut kept: %+v %v", m.ToolCalls, m.Raw)
	}
	if m.Role != "assistant" {
		t.Fatal("role lost")
	}
	want := int64(3 + 2 + 1 + 7 + 19)
	if got := b.Truncated(); got != want {
		t.Fatalf("Truncated = %d, want %d", got, want)
	}
}
