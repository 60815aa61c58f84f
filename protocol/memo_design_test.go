package protocol

import (
	"fmt"
	"strings"
	"testing"
)

// TestMemoDesignPointReads holds MemoBytes' sizing claim at an eighth of its scale: a
// memo of MemoBytes/8 serving 40 concurrent episodes (80% of the 400 at full scale) of 60 turns (~500-byte
// messages), interleaved and staggered so that episodes are at every turn at once.
// Once warm, a call should read little more than its new message: an accounting
// change that overcharges entries (a run's extra bytes filed again on every call, say)
// rotates the generations faster than episodes resend, and the memo thrashes (a
// review measured 18.6 reads per call at full scale with such a change, 1.85 without).
func TestMemoDesignPointReads(t *testing.T) {
	const scale = 8
	m := NewMemo[string](MemoBytes / scale)
	const eps, turns = 320 / scale, 60 // 80% of the design point: a shard's generations are coarser at this scale
	sys := `{"role":"system","content":"` + strings.Repeat("policy ", 70) + `"}`
	pad := strings.Repeat("w", 460)
	els := make(map[[2]int]string)
	el := func(e, k int) string {
		s, ok := els[[2]int{e, k}]
		if !ok {
			s = fmt.Sprintf(`{"role":"user","content":"episode %d turn %d %s"}`, e, k, pad)
			els[[2]int{e, k}] = s
		}
		return s
	}
	reads, calls := 0, 0
	var b strings.Builder
	for step := range 2 * turns {
		for e := range eps {
			n := (step+e*turns/eps)%turns + 2 // staggered
			b.Reset()
			b.WriteString("[" + sys)
			for k := 1; k < n; k++ {
				b.WriteString(",")
				b.WriteString(el(e+eps*(step/turns), k))
			}
			b.WriteString("]")
			before := reads
			runCall(m, b.String(), &reads)
			if step >= turns {
				calls++
			} else {
				reads = before // warming up
			}
		}
	}
	per := float64(reads) / float64(calls)
	t.Logf("warm: %.2f reads per call (1 is the new message alone); memo %d bytes", per, m.Bytes())
	if per > 3 {
		t.Errorf("at MemoBytes' design point a warm call reads %.2f elements, want about 1: the memo thrashes", per)
	}
}
