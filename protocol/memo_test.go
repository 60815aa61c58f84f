package protocol

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestMemoRead: a hit returns what was read from the same bytes, never what was read
// from other bytes, and the value never aliases the caller's buffer.
func TestMemoRead(t *testing.T) {
	m := NewMemo[string](1 << 20)
	reads := 0
	read := func(s string) string { reads++; return s }
	buf := []byte(`{"role":"user","content":"hi"}`)
	first := m.Read(buf, read)
	copy(buf, strings.Repeat("x", len(buf))) // the server reuses its buffer
	if first != `{"role":"user","content":"hi"}` {
		t.Fatalf("the value aliases the caller's buffer: %q", first)
	}
	tests := []struct {
		raw   string
		reads int
	}{
		{`{"role":"user","content":"hi"}`, 1}, // seen: a hit
		{`{"role":"user","content":"ho"}`, 2}, // other bytes: read
		{`{"role":"user","content":"hi"}`, 2},
		{`{"role":"user","content":"ho"}`, 2},
	}
	for _, tt := range tests {
		if got := m.Read([]byte(tt.raw), read); got != tt.raw || reads != tt.reads {
			t.Fatalf("Read(%s) = %q after %d reads, want itself after %d", tt.raw, got, reads, tt.reads)
		}
	}
	// Longer than an entry may be: read every time, never remembered.
	big := []byte(strings.Repeat("a", MemoMaxElement+1))
	m.Read(big, read)
	m.Read(big, read)
	if reads != 4 {
		t.Fatalf("an element over MemoMaxElement was remembered (%d reads)", reads)
	}
}

// TestMemoBounded: however many distinct elements go through, the bytes a memo
// accounts for stay under its bound, and an element read on every call stays.
func TestMemoBounded(t *testing.T) {
	for _, bound := range []int{0, 64 << 10, 1 << 20} {
		m := NewMemo[int](bound)
		hot := []byte(`{"role":"system","content":"the system prompt, resent on every call"}`)
		hotReads := 0
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 5000 {
					raw := fmt.Appendf(nil, `{"role":"tool","content":"result %d of %d %s"}`, i, g, strings.Repeat("z", i%300))
					m.Read(raw, func(s string) int { return len(s) })
				}
			})
		}
		for range 2000 {
			m.Read(hot, func(string) int { hotReads++; return 0 })
		}
		wg.Wait()
		if got := m.Bytes(); got > bound {
			t.Errorf("bound %d: the memo accounts for %d bytes", bound, got)
		}
		if bound >= 1<<20 && hotReads > 10 {
			t.Errorf("bound %d: the element read on every call was read %d times", bound, hotReads)
		}
	}
}

func TestSlot(t *testing.T) {
	var s Slot
	if _, ok := s.Load(); ok {
		t.Fatal("an empty slot holds a value")
	}
	for _, v := range []uint64{0, 1, 42, 1<<64 - 2} {
		s.Store(v)
		if got, ok := s.Load(); !ok || got != v {
			t.Fatalf("Store(%d): Load = %d, %v", v, got, ok)
		}
	}
}

// TestHitsSkip: Skip vouches for an element only where the body holds its bytes
// followed by the end of an array element, through its predecessor or its prefix,
// and Take gives the walk what Skip found.
func TestHitsSkip(t *testing.T) {
	m := NewMemo[string](1 << 20)
	long := `{"role":"system","content":"` + strings.Repeat("p", memoPrefix) + `"}`
	short := `{"role":"user","content":"hi"}`
	num := strings.Repeat("7", memoPrefix+1)
	h := m.Hits()
	h.Begin()
	for _, raw := range []string{long, short, num} {
		h.Read([]byte(raw), func(s string) string { return s })
	}
	h.Release()
	tests := []struct {
		body string
		at   []int // offsets Skip vouches for, from the start of each element
	}{
		{`[` + long + `,` + short + `]`, []int{1, 2 + len(long)}},
		{`[` + long + ` , ` + short + ` ]`, []int{1, 4 + len(long)}},
		{`[` + short + `,` + long + `]`, []int{2 + len(short)}}, // short: no predecessor, too short to index
		{`[` + long + `x]`, nil},
		{`[` + num + `7]`, nil}, // a longer number
		{`[` + num + `]`, []int{1}},
		{`[` + long[:len(long)-1] + `]`, nil},
	}
	for _, tt := range tests {
		h := m.Hits()
		b := []byte(tt.body)
		var got []int
		first := true
		for i := 1; i < len(b); i++ {
			if b[i] != '{' && b[i] != '7' || b[i-1] == '7' {
				continue
			}
			if end := h.Skip(b, i, first, nil); end >= 0 {
				got = append(got, i)
				if v, e, ok := h.Take(i); !ok || e != end || v != string(b[i:end]) {
					t.Fatalf("%s: Take(%d) = %q, %d, %v", tt.body, i, v, e, ok)
				}
				i = end - 1
			}
			first = false
		}
		h.Release()
		if fmt.Sprint(got) != fmt.Sprint(tt.at) {
			t.Errorf("%s: Skip vouched at %v, want %v", tt.body, got, tt.at)
		}
	}
}

// TestResentElementsFound: elements that calls resend stay remembered and found
// without a scan (Skip: by prefix, or as the successor of the one before them when
// too short to index), however many other elements churn through the memo's
// generations.
func TestResentElementsFound(t *testing.T) {
	m := NewMemo[int](256 << 10)
	head := `{"role":"system","content":"` + strings.Repeat("p", memoPrefix) + `"}`
	chain := []string{head, `{"role":"user","content":"hi"}`, `{"role":"assistant","content":"yes"}`}
	body := []byte(`[` + strings.Join(chain, ",") + `]`)
	reads, misses := 0, 0
	call := func() {
		h := m.Hits()
		h.Begin()
		i, first := 1, true
		for _, raw := range chain {
			if end := h.Skip(body, i, first, nil); end < 0 {
				misses++
				h.Read(body[i:i+len(raw)], func(string) int { reads++; return 0 })
			} else if _, _, ok := h.Take(i); !ok {
				t.Fatal("Take lost what Skip found")
			}
			i, first = i+len(raw)+1, false
		}
		h.Release()
	}
	for k := range 20000 {
		call()
		m.Read(fmt.Appendf(nil, `{"role":"tool","content":"churn %d %s"}`, k, strings.Repeat("z", 200)), func(string) int { return 0 })
	}
	// Each may be read, or missed, a few times when a shard turns over its two
	// generations between two calls; not on every call.
	if reads > 3*10 || misses > 3*10 {
		t.Errorf("the resent elements were read %d times, validated again %d times", reads, misses)
	}
	for _, raw := range chain {
		if e := m.get(xxhash.Sum64String(raw)); e == nil || e.raw != raw {
			t.Errorf("%s is no longer in the memo's generations", raw)
		}
	}
}

// TestSkipBeyondPrefixWays: more remembered elements share a prefix than it indexes
// (sessions whose system prompts differ only in a tag at the end); given where an
// element seems to end, Skip finds any of them by its bytes, and vouches for nothing
// whose bytes differ.
func TestSkipBeyondPrefixWays(t *testing.T) {
	m := NewMemo[string](1 << 20)
	elem := func(k int) string {
		return `{"role":"system","content":"` + strings.Repeat("policy ", 20) + fmt.Sprintf(`Session %d"}`, k)
	}
	h := m.Hits()
	for k := range 4 * memoWays {
		h.Begin()
		h.Read([]byte(elem(k)), func(s string) string { return s })
	}
	h.Release()
	endOf := func(b []byte, i int) int { return i + strings.Index(string(b[i:]), `"}`) + 2 }
	for _, tt := range []struct {
		body string
		skip func([]byte, int) int
		want bool
	}{
		{`[` + elem(0) + `]`, nil, false}, // the oldest: no longer among its prefix's ways
		{`[` + elem(0) + `]`, endOf, true},
		{`[` + elem(4*memoWays-1) + `]`, nil, true},
		{`[` + elem(4*memoWays) + `]`, endOf, false}, // never remembered
		{`[` + elem(1) + `x]`, endOf, false},
	} {
		h := m.Hits()
		end := h.Skip([]byte(tt.body), 1, true, tt.skip)
		h.Release()
		if got := end == len(tt.body)-1; got != tt.want || end >= 0 && !got {
			t.Errorf("%.40s…%s (skip given: %v): Skip = %d", tt.body, tt.body[len(tt.body)-14:], tt.skip != nil, end)
		}
	}
}
