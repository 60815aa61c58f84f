package main

import (
	"io"
	"math"
	"testing"
	"time"
)

func TestEventsEnded(t *testing.T) {
	tests := []struct {
		name string
		prev byte
		p    string
		want int
	}{
		{"one whole event", 0, "data: {}\n\n", 1},
		{"two events merged", 0, "data: {}\n\ndata: [DONE]\n\n", 2},
		{"blank line straddles reads", '\n', "\ndata: x", 1},
		{"event without its end", 0, "data: {\"a\":1}\n", 0},
		{"newline after a newline in a read", '}', "\n", 0},
		{"empty read", '\n', "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := eventsEnded(tt.prev, []byte(tt.p)); got != tt.want {
				t.Errorf("eventsEnded(%q, %q) = %d, want %d", tt.prev, tt.p, got, tt.want)
			}
		})
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/camproxy/camproxy/proxy
cpu: AMD EPYC
BenchmarkPipeline/turn=1/new-episode-2         	     300	    142151 ns/op	  45.21 MB/s	     13060 B/op	        73 allocs/op	         2.040 body-x	        13060 proxy-B/op	        73.60 proxy-allocs/op	     71000 proxy-ns/op
BenchmarkEpisodeTurnRatio-2   	     300	   1000 ns/op	  9.74 proxy-t60/t1	  17.7 t60/t1
--- FAIL: BenchmarkBroken
BenchmarkNoNumber-2   	  abc	  1 ns/op
PASS
ok  	github.com/camproxy/camproxy/proxy	3.2s
`
	got := parseBench([]byte(out))
	if len(got) != 2 {
		t.Fatalf("parsed %d lines, want 2: %+v", len(got), got)
	}
	p := &PipelineResult{Benchmarks: got}
	if n := len(p.pipeline()); n != 1 {
		t.Fatalf("pipeline() has %d lines, want 1", n)
	}
	b := got[0]
	if b.Name != "BenchmarkPipeline/turn=1/new-episode" || b.N != 300 {
		t.Errorf("name %q n %d", b.Name, b.N)
	}
	for unit, want := range map[string]float64{"allocs/op": 73, "B/op": 13060, "proxy-allocs/op": 73.6, "body-x": 2.04, "proxy-ns/op": 71000} {
		if b.Metrics[unit] != want {
			t.Errorf("%s = %v, want %v", unit, b.Metrics[unit], want)
		}
	}
	if v, ok := p.metric("BenchmarkEpisodeTurnRatio", "proxy-t60/t1"); !ok || v != 9.74 {
		t.Errorf("proxy-t60/t1 = %v %v, want 9.74", v, ok)
	}
}

// TestTargets builds a run's results by hand and checks each target's value, bound
// and status: the bounds are the floor's added value plus the slack, the ratios
// camproxy's over the floor's, and a part not run is N/A rather than a PASS.
func TestTargets(t *testing.T) {
	cell := func(rate float64, mode string, fP50, fP99, cP50, cP99 float64) *Cell {
		return &Cell{Rate: rate, Mode: mode, Paths: []*PathStats{
			{Path: "direct", P50: 1000, P99: 2000, Events: 1000},
			{Path: "floor", AddedP50: fP50, AddedP99: fP99, AddedCPUPerReq: 20, Events: 1000},
			{Path: "camproxy", AddedP50: cP50, AddedP99: cP99, AddedCPUPerReq: 30, Events: 1000, Coalesced: 1},
		}}
	}
	e := &env{o: &options{interval: 2 * time.Millisecond, satConns: 64}, out: io.Discard, res: &Results{
		Cells: []*Cell{cell(1000, "nonstream", 80, 100, 180, 351), cell(1000, "stream", 50, 300, 60, 540),
			cell(4000, "stream", 1000, 5000, 1900, 12000)},
		Paced: []PacedResult{{Path: "camproxy", Events: 500}},
		Saturation: []SatResult{{Path: "direct", RPS: 20000}, {Path: "floor", RPS: 10000, AddedCPUPerReq: 40},
			{Path: "camproxy", RPS: 7000, AddedCPUPerReq: 80}},
		Long: &LongResult{Turns: 60, AddedFirst: 200, AddedLast: 320, Ratio: 1.6},
	}}
	e.targets()
	want := []struct {
		status       string
		value, bound float64
	}{
		{"PASS", 180, 180},     // p50: floor 80 + 100
		{"MISS", 351, 350},     // p99: floor 100 + 250
		{"PASS", 540, 550},     // TTFB p99: floor 300 + 250
		{"MISS", 0.1, 0},       // 1 of 1000 events coalesced under load, 0 in the paced check
		{"PASS", 1900, 2000},   // 4000 rps stream TTFB p50: 2× the floor's +1000
		{"MISS", 12000, 10000}, // p99: 2× the floor's +5000
		{"MISS", 1, 0},         // 1 event merged, none through the floor
		{"PASS", 70, 70},       // 7000 of 10000 req/s
		{"PASS", 2, 2},         // +80 vs +40 µs
		{"N/A", 0, 30},         // pipeline not run
		{"N/A", 0, 2},          //
		{"MISS", 1.6, 1.5},     // turn 60
		{"N/A", 0, 0},          // overload row not run
		{"N/A", 0, 0},          //
		{"N/A", 0, 1},          //
	}
	if len(e.res.Targets) != len(want) {
		t.Fatalf("%d targets, want %d", len(e.res.Targets), len(want))
	}
	for i, w := range want {
		got := e.res.Targets[i]
		if got.Status != w.status || math.Abs(got.Value-w.value) > 1e-9 || got.Bound != w.bound || got.Pass != (w.status == "PASS") {
			t.Errorf("%s: %s value %v bound %v pass %v, want %s %v %v", got.Name, got.Status, got.Value, got.Bound, got.Pass, w.status, w.value, w.bound)
		}
	}
}
