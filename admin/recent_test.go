package admin

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRecentAdd is every finished turn reaching the dashboard: parallel workers,
// each running its own episodes of 30 turns, over a Recent that keeps the default 200
// (so episodes are forgotten as new ones start, as under load).
func BenchmarkRecentAdd(b *testing.B) {
	const turns = 30
	ids := make([]string, 1<<14)
	for i := range ids {
		ids[i] = fmt.Sprintf("ep_%024x", i)
	}
	r := NewRecent(0)
	var next atomic.Uint64
	at := time.Unix(1000, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var id string
		for i := 0; pb.Next(); i++ {
			if i%turns == 0 {
				id = ids[next.Add(1)%uint64(len(ids))]
			}
			r.Add(id, Turn{Turn: i % turns, Status: 200, TotalMs: 21.5, InputTokens: 3000, OutputTokens: 120, At: at})
		}
	})
}
