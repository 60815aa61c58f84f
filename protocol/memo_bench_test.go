package protocol

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
)

// BenchmarkSkipResent is validation's use of the memo on a call that resends the
// previous call's 40 elements: the first two looked up, the rest taken from the
// second's run (Hits.Skip, Hits.follow). cpu-ns/op: the process's CPU per call,
// steadier than ns/op on a shared box.
func BenchmarkSkipResent(b *testing.B) {
	m := NewMemo[string](MemoBytes)
	els := runElems("Session bench", 40)
	body := []byte("[" + strings.Join(els, ",") + "]")
	reads := 0
	for range 2 { // remembered, and left as a run
		runCall(m, string(body), &reads)
	}
	endOf := func(b []byte, i int) int { return i + strings.IndexByte(string(b[i:]), '}') + 1 }
	b.SetBytes(int64(len(body)))
	testkit.CPUPerOp(b, func() {
		h := m.Hits()
		for i, first := 1, true; i < len(body)-1; first = false {
			end := h.Skip(body, i, first, endOf)
			if end < 0 {
				b.Fatal("an element not vouched for")
			}
			i = skipWS(body, skipWS(body, end)+1)
		}
		if h.ran != len(els)-2 {
			b.Fatalf("%d elements taken from the run, want %d", h.ran, len(els)-2)
		}
		h.Release()
	})
}

// BenchmarkSkipSessions is validation's lookup of the system prompt of bench-load's
// workload: 64 sessions at once, each sending a prompt of 6.3 KB that differs from the
// others' only in a session tag at its end, more sessions than a prefix indexes.
func BenchmarkSkipSessions(b *testing.B) {
	m := NewMemo[string](MemoBytes)
	var bodies [][]byte
	for k := range 64 {
		sys := `{"role":"system","content":"` + strings.Repeat("Airline policy, rule after rule. ", 190) + "Session " + strconv.Itoa(k) + `"}`
		bodies = append(bodies, []byte("["+sys+`,{"role":"user","content":"Hi, I want to change my flight."}]`))
	}
	reads := 0
	for _, body := range bodies {
		runCall(m, string(body), &reads)
	}
	endOf := func(b []byte, i int) int { return i + bytes.Index(b[i:], []byte(`"}`)) + 2 }
	k := 0
	testkit.CPUPerOp(b, func() {
		body := bodies[k%len(bodies)]
		k++
		h := m.Hits()
		if h.Skip(body, 1, true, endOf) < 0 {
			b.Fatal("a remembered system prompt not vouched for")
		}
		h.Release()
	})
}
