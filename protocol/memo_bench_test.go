package protocol

import (
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
