package protocol

import (
	"fmt"
	"strings"
	"sync"
	"testing"
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
