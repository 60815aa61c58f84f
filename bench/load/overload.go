package main

import (
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/camproxy/camproxy/proxy"
)

// The overload row (issue 32): streams offered open loop at twice camproxy's measured
// saturation rate, to every path. camproxy runs with its default admission limit
// (server.max_in_flight = proxy.DefaultMaxInFlight, server.queue_timeout 1s): the calls
// past it are refused with 503, and those admitted must keep bounded latency and their
// events' timing. The floor has no limit: at this rate it is below its own saturation.

// OverloadResult is the overload row.
type OverloadResult struct {
	Rate        float64         `json:"rate"` // offered, calls/s: 2× camproxy's saturation
	Mode        string          `json:"mode"`
	Seconds     float64         `json:"seconds_per_path"`
	Slots       int             `json:"conversations_in_flight"`
	MaxInFlight int             `json:"camproxy_max_in_flight"`
	Paths       []*OverloadPath `json:"paths"`
}

// OverloadPath is one path under overload. Latencies (µs, time to first byte, from
// when the call was due) are of the admitted calls; added = minus the direct path's.
type OverloadPath struct {
	Path        string  `json:"path"`
	Offered     int     `json:"offered"`
	Admitted    int     `json:"admitted"`
	Refused     int     `json:"refused_503"`
	Errors      int     `json:"other_errors"`
	FirstError  string  `json:"first_error,omitempty"`
	AdmittedRPS float64 `json:"admitted_rps"`
	P50         float64 `json:"p50_us"`
	P99         float64 `json:"p99_us"`
	AddedP99    float64 `json:"added_p99_us"`
	Events      int     `json:"sse_events"`
	Merged      int     `json:"sse_events_coalesced"`
}

// overload runs the row; it needs the saturation row's camproxy rate.
func (e *env) overload() {
	s := e.res.Saturation
	if len(s) != 3 || s[2].RPS <= 0 {
		e.printf("== overload: not run (it offers 2× camproxy's saturation rate: -skip saturation) ==\n\n")
		return
	}
	rate := math.Round(2 * s[2].RPS)
	limit := proxy.DefaultMaxInFlight()
	if overloadLimit > 0 {
		limit = overloadLimit
	}
	// Enough conversations in flight that the generator does not wait for a slot of
	// its own before camproxy's limit and queue are full (it stays open loop): a
	// quarter second of calls, and at least 3× max_in_flight.
	k := max(int(rate/4), 3*limit)
	// Each call in flight holds up to 4 descriptors in this process (the generator's
	// socket and the proxy's accepted end, the proxy's upstream socket and the
	// upstream's end), and the three paths' connections add up: past the file limit a
	// listener's accept fails for good and the run would hang. The connections of the
	// parts before, and of each slice, are let go.
	for _, p := range append(e.paths, e.norec) {
		p.hc.CloseIdleConnections()
	}
	if n := fileLimit(); n > 0 {
		k = min(k, max(limit, (n-3000)/10))
	}
	res := &OverloadResult{Rate: rate, Mode: "stream", Seconds: e.o.duration.Seconds(), Slots: k, MaxInFlight: limit}
	samples := make([]*sample, len(e.paths))
	slots := make([][]*slot, len(e.paths))
	for i := range e.paths {
		samples[i], slots[i] = newSample(), newSlots(k)
	}
	slice := e.o.duration / time.Duration(e.o.rounds)
	for r := range e.o.rounds {
		for j := range e.paths {
			i := (j + r) % len(e.paths)
			runOpen(e.paths[i], e.convs, slots[i], rate, slice, true, samples[i])
			// Let the calls still queued or streaming end before the next path's slice.
			time.Sleep(200 * time.Millisecond)
			e.paths[i].hc.CloseIdleConnections()
		}
	}
	for i, p := range e.paths {
		sm := samples[i]
		sm.sorted()
		op := &OverloadPath{Path: p.name, Offered: sm.n, Refused: sm.refused, Errors: sm.errs - sm.refused,
			Admitted: sm.n - sm.errs, P50: us(pct(sm.lat, .5)), P99: us(pct(sm.lat, .99)), Events: sm.events, Merged: sm.merged}
		op.AdmittedRPS = float64(op.Admitted) / sm.wall.Seconds()
		if sm.firstErr != nil {
			op.FirstError = sm.firstErr.Error()
		}
		res.Paths = append(res.Paths, op)
	}
	for _, op := range res.Paths {
		op.AddedP99 = op.P99 - res.Paths[0].P99
	}
	e.res.Overload = res
	e.printf("== overload: streams offered open loop at %.0f/s (2× camproxy's saturation), %s per path in %d slices, %d conversations in flight; camproxy max_in_flight %d ==\n",
		rate, e.o.duration, e.o.rounds, k, res.MaxInFlight)
	e.printf("%-9s %7s %8s %8s %6s %10s %8s %8s %8s %16s\n", "path", "offered", "admitted", "refused", "errors", "admitted/s", "p50", "p99", "+p99", "events merged")
	for _, op := range res.Paths {
		e.printf("%-9s %7d %8d %8d %6d %10.0f %8.0f %8.0f %8.0f %7d of %-7d\n", op.Path, op.Offered, op.Admitted, op.Refused, op.Errors,
			op.AdmittedRPS, op.P50, op.P99, op.AddedP99, op.Merged, op.Events)
		if op.FirstError != "" && op.Errors > 0 {
			e.printf("          first error: %.200s\n", op.FirstError)
		}
	}
	e.printf("(µs, time to first byte of the admitted calls, from when each was due)\n\n")
}

// overloadTargets are the overload row's targets: camproxy's admitted calls keep
// their latency within overloadP99Slack of the floor's added p99, their events are
// merged no more than the floor's, and the excess is refused rather than queued.
func (e *env) overloadTargets(add func(name, rule string, value float64, cmp string, bound float64, unit, detail string)) {
	const name = "overload 2× saturation: admitted +p99"
	rule := fmt.Sprintf("≤ floor + %.0f µs", overloadP99Slack)
	o := e.res.Overload
	if o == nil || len(o.Paths) != 3 {
		na := math.NaN()
		add(name, rule, na, "<=", na, "µs", "not run (-skip overload or saturation)")
		add("overload: events merged", "≤ the floor's", na, "<=", na, "events", "not run")
		add("overload: excess refused", "> 0 refused, no other errors", na, ">=", 1, "calls", "not run")
		return
	}
	d, f, cp := o.Paths[0], o.Paths[1], o.Paths[2]
	add(name, rule, cp.AddedP99, "<=", f.AddedP99+overloadP99Slack, "µs",
		fmt.Sprintf("TTFB p99 of admitted streams at %.0f/s offered: direct %.0f, floor %.0f, camproxy %.0f µs; camproxy admitted %d of %d (%.0f/s), refused %d",
			o.Rate, d.P99, f.P99, cp.P99, cp.Admitted, cp.Offered, cp.AdmittedRPS, cp.Refused))
	add("overload: events merged", "≤ the floor's", float64(cp.Merged), "<=", float64(f.Merged), "events",
		fmt.Sprintf("SSE events that arrived in one read with the one before: camproxy %d of %d, floor %d of %d, direct %d of %d",
			cp.Merged, cp.Events, f.Merged, f.Events, d.Merged, d.Events))
	v := float64(cp.Refused)
	if cp.Errors > 0 {
		v = 0 // an error other than a refusal is no graceful overload
	}
	add("overload: excess refused", "> 0 refused (503), no other errors", v, ">=", 1, "calls",
		fmt.Sprintf("camproxy refused %d, other errors %d %s", cp.Refused, cp.Errors, cp.FirstError))
}

// overloadP99Slack is how much more than the floor an admitted call may wait at its
// first byte under overload: a full queue (as many calls waiting as max_in_flight)
// drained at camproxy's own rate.
const overloadP99Slack = 100e3

// overloadLimit is -max-in-flight: camproxy's server.max_in_flight in this run (0:
// the default), for sizing the default; the targets are for the default.
var overloadLimit int

// fileLimit is this process's soft limit on open files (0: unknown).
func fileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return int(min(lim.Cur, 1<<30))
}
