package episode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// benchTip is a tip unique to (goroutine, episode slot, turn), so parallel workers
// never share a tip and the set of tips stays bounded however long the run.
func benchTip(g, slot, turn uint64) uint64 {
	h := (g<<40 | slot<<20 | turn) * 0x9E3779B97F4A7C15
	return h ^ h>>29
}

// BenchmarkMemoryTurn is the store's share of one stitched turn, as the proxy makes
// it: Claim the conversation's candidate tips (the longest is known), Get the
// episode, Update it, SetTip the new history. Each worker runs its own episodes, so
// any slowdown with more CPUs is the store's locking, not shared data.
func BenchmarkMemoryTurn(b *testing.B) {
	const slots, turns, candidates = 8, 60, 8
	m := NewMemory(time.Hour, nil)
	defer m.Close()
	ctx := context.Background()
	var workers atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := workers.Add(1)
		ids := make([]string, slots)
		for i := range ids {
			ids[i] = fmt.Sprintf("ep_bench_%d_%d", g, i)
		}
		tips := make([]uint64, 0, candidates)
		var n uint64
		for pb.Next() {
			slot, turn := n/turns%slots, n%turns
			n++
			id := ids[slot]
			if turn == 0 {
				_, _, _ = m.Create(ctx, &Episode{ID: id, Arm: "cam"})
				_ = m.SetTip(ctx, benchTip(g, slot, 0), id)
				continue
			}
			tips = tips[:0]
			for t := int(turn) - 1; t >= 0 && len(tips) < candidates; t-- {
				tips = append(tips, benchTip(g, slot, uint64(t)))
			}
			got, pos, ok, err := m.Claim(ctx, tips)
			if err != nil || !ok || got != id || pos != 0 {
				b.Fatalf("claim = %q %d %v %v, want %q at 0", got, pos, ok, err, id)
			}
			ep, err := m.Get(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			ep.Turns++
			_ = m.Update(ctx, ep)
			_ = m.SetTip(ctx, benchTip(g, slot, turn), id)
		}
	})
}

// BenchmarkMemoryClaimMiss is a call that stitches to nothing: every candidate tip is
// looked up and none is known (a conversation this instance never saw).
func BenchmarkMemoryClaimMiss(b *testing.B) {
	const candidates = 16
	m := NewMemory(time.Hour, nil)
	defer m.Close()
	ctx := context.Background()
	for i := range uint64(4096) { // a populated store, as under load
		_ = m.SetTip(ctx, benchTip(0, 0, i), "ep_known")
	}
	var workers atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := workers.Add(1)
		tips := make([]uint64, candidates)
		var n uint64
		for pb.Next() {
			for i := range tips {
				tips[i] = benchTip(g, n%1024, uint64(i))
			}
			n++
			if _, _, ok, _ := m.Claim(ctx, tips); ok {
				b.Fatal("an unknown tip was claimed")
			}
		}
	})
}

// BenchmarkMemoryAdvance is what a finished turn writes (Advance: its episode updated,
// a strict and a loose tip set), each turn's tips new, as a stitched conversation's
// are: the tips' maps grow as under load.
func BenchmarkMemoryAdvance(b *testing.B) {
	m := NewMemory(time.Hour, nil)
	defer m.Close()
	ctx := context.Background()
	var workers atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := workers.Add(1)
		eps := make([]*Episode, 256)
		for i := range eps {
			eps[i] = &Episode{ID: NewID()}
			_, _, _ = m.Create(ctx, eps[i])
		}
		var n uint64
		for pb.Next() {
			ep := eps[n%256]
			_ = m.Advance(ctx, ep, benchTip(g, n, 0), benchTip(g, n, 1))
			n++
		}
	})
}
