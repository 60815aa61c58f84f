package protocol

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"weak"

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

// TestSkipLongByTail: long elements (system prompts of kilobytes, one per session,
// told apart by a tag at their end) that share a prefix, more of them than it
// indexes, are filed under their tail key and found by it: any of them, and nothing
// whose bytes differ from all of them, not even an element of the same prefix, length
// and tail that differs in its middle.
func TestSkipLongByTail(t *testing.T) {
	m := NewMemo[string](1 << 22)
	elem := func(k int, word string) string {
		return `{"role":"system","content":"` + strings.Repeat(word+" ", memoLong/len(word)) + fmt.Sprintf(`Session %03d"}`, k)
	}
	h := m.Hits()
	for k := range 4 * memoWays {
		h.Begin()
		h.Read([]byte(elem(k, "policy")), func(s string) string { return s })
	}
	h.Release()
	for k := range 4 * memoWays {
		raw := []byte(elem(k, "policy"))
		if _, e, _ := m.filed(tailKey(xxhash.Sum64(raw[:memoPrefix]), raw), true); e == nil || e.raw != string(raw) {
			t.Errorf("session %d: not filed under its tail key", k)
		}
	}
	endOf := func(b []byte, i int) int { return i + strings.Index(string(b[i:]), `"}`) + 2 }
	middle := elem(2, "policy")
	middle = middle[:200] + "P" + middle[201:] // same prefix, length and tail
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`[` + elem(0, "policy") + `]`, true}, // the oldest: found by its tail key
		{`[` + elem(4*memoWays-1, "policy") + `]`, true},
		{`[` + elem(4*memoWays, "policy") + `]`, false}, // never remembered
		{`[` + middle + `]`, false},
		{`[` + elem(1, "policy") + `x]`, false},
	} {
		h := m.Hits()
		end := h.Skip([]byte(tt.body), 1, true, endOf)
		h.Release()
		if got := end == len(tt.body)-1; got != tt.want || end >= 0 && !got {
			t.Errorf("…%s: Skip = %d", tt.body[len(tt.body)-14:], end)
		}
	}
}

// runCall is one call's use of the memo as an adapter's parse makes it: validation
// asks Skip at each element it reaches (known elements, and runs of them, are
// jumped), then the walk reads every element (Next). It returns the values walked,
// and how many elements Skip looked up one by one and took from a run.
func runCall(m *Memo[string], body string, reads *int) (vals []string, lookups, ran int) {
	b := []byte(body)
	endOf := func(b []byte, i int) int { return i + strings.IndexByte(string(b[i:]), '}') + 1 }
	read := func(s string) string { *reads++; return s }
	h := m.Hits()
	for i, first := 1, true; i < len(b)-1; first = false {
		end := h.Skip(b, i, first, endOf)
		if end < 0 {
			end = endOf(b, i)
		}
		i = skipWS(b, skipWS(b, end)+1)
	}
	h.Begin()
	for i := 1; i < len(b)-1; {
		i = skipWS(b, skipWS(b, h.Next(b, i, endOf, read))+1)
	}
	for _, p := range h.Walked() {
		vals = append(vals, p.V)
	}
	lookups, ran = h.lookups, h.ran
	h.Release()
	return vals, lookups, ran
}

func runElems(tag string, n int) []string {
	els := []string{`{"role":"system","content":"` + strings.Repeat("policy ", 12) + tag + `"}`}
	for k := 1; k < n; k++ {
		els = append(els, fmt.Sprintf(`{"role":"user","content":"turn %d of %s %s"}`, k, tag, strings.Repeat("z", k%7*20)))
	}
	return els
}

// TestRunsTakeResentHistory: a call that resends the previous call's array takes it
// whole from that call's run, with two lookups (its first element, and the second,
// which holds the run) and one for each new element; where the history was rewritten (an earlier message edited, the
// history compacted, whitespace changed) it takes the run only as far as the bytes
// are the same, and every call reads what a fresh read gives.
func TestRunsTakeResentHistory(t *testing.T) {
	m := NewMemo[string](MemoBytes)
	els := runElems("Session 1", 24)
	reads := 0
	check := func(name string, arr []string, sep string, wantLookups, wantRan int) {
		t.Helper()
		before := reads
		vals, lookups, ran := runCall(m, "["+strings.Join(arr, sep)+"]", &reads)
		if fmt.Sprint(vals) != fmt.Sprint(arr) {
			t.Fatalf("%s: walked %v, want %v", name, vals, arr)
		}
		if wantLookups >= 0 && (lookups != wantLookups || ran != wantRan) {
			t.Errorf("%s: %d lookups, %d taken from a run; want %d and %d (%d reads)", name, lookups, ran, wantLookups, wantRan, reads-before)
		}
	}
	check("turn 1", els[:2], ",", -1, 0)
	for n := 4; n <= 20; n += 2 {
		// The previous call's n-2 elements: the first looked up, the rest taken from
		// its run; the two new ones looked up (and read).
		check(fmt.Sprintf("turn of %d", n), els[:n], ",", 4, n-4)
	}
	check("same again, other whitespace", els[:20], " ,\n ", 2, 18)
	edited := slices.Clone(els[:22])
	edited[5] = `{"role":"user","content":"an earlier message the agent edited"}`
	check("an edited earlier message", edited, ",", -1, 3)
	if before := reads; true {
		check("the edit resent", edited, ",", 2, 20)
		if reads != before {
			t.Errorf("the edited history was read again (%d reads)", reads-before)
		}
	}
	compacted := append([]string{els[0], `{"role":"user","content":"summary of the conversation so far"}`}, els[18:22]...)
	check("a compacted history", compacted, ",", -1, -1)
	// Other episodes that share the system prompt, more than a ring holds: each
	// takes its history from the run its second element holds.
	for k := range 3 * memoWays {
		other := append([]string{els[0]}, runElems(fmt.Sprintf("Session x%d", k), 8)[1:]...)
		check("other episode, first call", other[:6], ",", -1, -1)
		check("other episode, next call", other[:8], ",", 4, 4)
	}
	// An element the memo dropped is not taken from a run that still names it: the
	// run is taken up to it, and it is read again.
	hist := els[:12]
	check("before an element ages out", hist, ",", 2, 10)
	shard := func(raw string) uint64 { return xxhash.Sum64String(raw) % memoShards }
	k := 3 // an element whose shard no element before it shares
	for ; k < len(hist); k++ {
		if !slices.ContainsFunc(hist[:k], func(e string) bool { return shard(e) == shard(hist[k]) }) {
			break
		}
	}
	if k == len(hist) {
		t.Fatal("no element to age out alone")
	}
	sh := &m.shards[shard(hist[k])]
	sh.mu.Lock()
	sh.room(m.shardMax+1, m.shardMax) // two new generations: its entries age out
	sh.room(m.shardMax+1, m.shardMax)
	sh.mu.Unlock()
	before := reads
	_, lookups, ran := runCall(m, "["+strings.Join(hist, ",")+"]", &reads)
	if ran != k-2 || lookups != len(hist)-ran || reads == before {
		t.Errorf("element %d aged out: %d lookups, %d taken from a run, %d reads; want %d taken", k, lookups, ran, reads-before, k-2)
	}
	check("after", hist, ",", -1, -1)
}

// TestRunsBounded: runs are accounted with the entries that hold them, so however
// many arrays go through, the memo's bytes stay under its bound.
func TestRunsBounded(t *testing.T) {
	for _, bound := range []int{0, 64 << 10, 1 << 20} {
		m := NewMemo[string](bound)
		reads := 0
		for k := range 400 {
			els := runElems(fmt.Sprintf("Session %d", k%40), 30+k%17)
			for n := 2; n <= len(els); n += 7 {
				runCall(m, "["+strings.Join(els[:n], ",")+"]", &reads)
			}
			if got := m.Bytes(); got > bound {
				t.Fatalf("bound %d: the memo accounts for %d bytes", bound, got)
			}
		}
	}
}

// TestRunsAcrossGC: a run's elements are resolved through an array only a weak
// pointer reaches, which a GC cycle frees: the next call still takes the history
// whole from the run (the array made again), and an element the memo dropped is
// freed by the GC even while the entry holding the run lives.
func TestRunsAcrossGC(t *testing.T) {
	m := NewMemo[string](MemoBytes)
	els := runElems("Session gc", 16)
	reads := 0
	runCall(m, "["+strings.Join(els[:8], ",")+"]", &reads)
	for n := 10; n <= 14; n += 2 { // each call of the episode after a GC cycle
		runtime.GC()
		if _, lookups, ran := runCall(m, "["+strings.Join(els[:n], ",")+"]", &reads); lookups != 4 || ran != n-4 {
			t.Fatalf("after a GC, %d elements: %d lookups, %d taken from a run; want 4 and %d", n, lookups, ran, n-4)
		}
	}
	// A run that outlived a GC cycle (the history resent as it was).
	runtime.GC()
	if _, lookups, ran := runCall(m, "["+strings.Join(els[:14], ",")+"]", &reads); lookups != 2 || ran != 12 {
		t.Fatalf("the history resent after a GC: %d lookups, %d taken from a run; want 2 and 12", lookups, ran)
	}
	holder := m.get(xxhash.Sum64String(els[runFrom]))
	if holder == nil || holder.runs[0].Load() == nil {
		t.Fatal("no run held")
	}
	var gone []weak.Pointer[memoEntry[string]]
	for _, raw := range els[runFrom+1 : 12] {
		e := m.get(xxhash.Sum64String(raw))
		if e == nil {
			t.Fatalf("%s not remembered", raw)
		}
		gone = append(gone, e.self)
	}
	for i := range m.shards { // two new generations everywhere: every entry dropped
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.room(m.shardMax+1, m.shardMax)
		sh.room(m.shardMax+1, m.shardMax)
		sh.mu.Unlock()
	}
	runtime.GC()
	runtime.GC()
	for k, w := range gone {
		if w.Value() != nil {
			t.Errorf("element %d outlives the memo: the run holding it keeps it alive", k+runFrom+1)
		}
	}
	runtime.KeepAlive(holder)
}
