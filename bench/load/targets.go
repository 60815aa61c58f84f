package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
)

// quickFlags are the -quick run's settings for the flags not given: only what issue
// 17's and 32's targets need (1 000 and 4 000 rps, both modes), in shorter slices, without issue 9's
// record, drain and idle-stream checks.
var quickFlags = [][2]string{
	{"rates", "1000,4000"},
	{"duration", "2s"},
	{"rounds", "2"},
	{"sat-duration", "1500ms"},
	{"long-episodes", "6"},
	{"lockstep-streams", "20"},
	{"paced-streams", "60"},
	{"bench-time", "300x"},
	{"skip", "record,drain,idle"},
}

func quickSummary() string {
	var b strings.Builder
	for i, f := range quickFlags {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "-%s %s", f[0], f[1])
	}
	return b.String() + " (flags given explicitly win)"
}

// applyQuick sets the quick run's flags that the command line left alone.
func applyQuick() {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range quickFlags {
		if !given[f[0]] {
			_ = flag.Set(f[0], f[1])
		}
	}
}

// Target is one of issue 17's targets as measured in this run: Value Cmp Bound
// passes. Status is PASS, MISS, or N/A when this run did not measure it (a part
// skipped, a rate not run, the pipeline benchmark failing).
type Target struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Cmp    string  `json:"cmp"` // "<=" or ">="
	Bound  float64 `json:"bound"`
	Unit   string  `json:"unit"` // µs, %, x, allocs
	Status string  `json:"status"`
	Pass   bool    `json:"pass"`
	Rule   string  `json:"rule"`   // the bound as the issue states it
	Detail string  `json:"detail"` // how the value was made, and its parts
}

// Check is one of issue 9's checks that issue 17 does not restate.
type Check struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Pass     bool   `json:"pass"`
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "µs":
		return fmt.Sprintf("%+.0f µs", v)
	case "%":
		return fmt.Sprintf("%.2f%%", v)
	case "x":
		return fmt.Sprintf("%.2fx", v)
	default:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
}

// targets works out issue 17's targets (and issue 9's remaining checks) from this
// run's results and prints them last.
func (e *env) targets() {
	var ts []Target
	add := func(name, rule string, value float64, cmp string, bound float64, unit, detail string) {
		t := Target{Name: name, Rule: rule, Value: value, Cmp: cmp, Bound: bound, Unit: unit, Detail: detail}
		switch {
		case math.IsNaN(value) || math.IsInf(value, 0) || math.IsNaN(bound):
			t.Value, t.Status = 0, "N/A"
			if math.IsNaN(bound) {
				t.Bound = 0
			}
		case cmp == "<=":
			t.Pass = value <= bound
		default:
			t.Pass = value >= bound
		}
		if t.Status == "" {
			t.Status = map[bool]string{true: "PASS", false: "MISS"}[t.Pass]
		}
		ts = append(ts, t)
	}
	na := math.NaN()
	find := func(rate float64, mode string) *Cell {
		for _, c := range e.res.Cells {
			if c.Rate == rate && c.Mode == mode {
				return c
			}
		}
		return nil
	}

	// Latency at 1 000 rps, open loop: added = path percentile − direct percentile.
	latency := func(mode, name, which string, slack float64) {
		rule := fmt.Sprintf("≤ floor + %.0f µs", slack)
		c := find(1000, mode)
		if c == nil {
			add(name, rule, na, "<=", na, "µs", "not run: -rates has no 1000 or -modes no "+mode)
			return
		}
		d, f, cp := c.Paths[0], c.Paths[1], c.Paths[2]
		pick := func(ps *PathStats) (float64, float64) {
			if which == "p50" {
				return ps.P50, ps.AddedP50
			}
			return ps.P99, ps.AddedP99
		}
		dv, _ := pick(d)
		_, fa := pick(f)
		cv, ca := pick(cp)
		errs := ""
		if cp.Errors+f.Errors+d.Errors > 0 {
			errs = fmt.Sprintf("; ERRORS direct %d floor %d camproxy %d", d.Errors, f.Errors, cp.Errors)
		}
		add(name, rule, ca, "<=", fa+slack, "µs", fmt.Sprintf("%s: direct %.0f, camproxy %.0f µs; floor adds %+.0f µs; camproxy − floor %+.0f µs; n=%d per path%s",
			which, dv, cv, fa, ca-fa, cp.N, errs))
	}
	latency("nonstream", "non-stream 1000 rps: added p50", "p50", 100)
	latency("nonstream", "non-stream 1000 rps: added p99", "p99", 250)
	latency("stream", "stream 1000 rps: added TTFB p99", "p99", 250)

	// No chunk coalescing: events that reached the client merged into one read with
	// the event before them, in the quiet paced check and under 1 000 rps of streams;
	// the value is the worse of the two.
	{
		rule := "0 events merged with the one before"
		var cp, d, f *PacedResult
		for i := range e.res.Paced {
			switch p := &e.res.Paced[i]; p.Path {
			case "camproxy":
				cp = p
			case "direct":
				d = p
			case "floor":
				f = p
			}
		}
		if cp == nil || cp.Events == 0 {
			add("stream: no chunk coalescing", rule, na, "<=", 0, "%", "not run (-skip paced)")
		} else {
			detail := fmt.Sprintf("camproxy %d of %d events (%d streams, 4 at a time, events %s apart upstream) arrived in the same read as the one before",
				cp.Coalesced, cp.Events, cp.Streams, e.o.interval)
			if d != nil && f != nil {
				detail += fmt.Sprintf("; direct %d of %d, floor %d of %d", d.Coalesced, d.Events, f.Coalesced, f.Events)
			}
			v := 100 * cp.Fraction
			if c := find(1000, "stream"); c != nil {
				l := c.Paths[2]
				detail += fmt.Sprintf("; under 1000 rps of streams: camproxy %d of %d, direct %d of %d, floor %d of %d",
					l.Coalesced, l.Events, c.Paths[0].Coalesced, c.Paths[0].Events, c.Paths[1].Coalesced, c.Paths[1].Events)
				v = max(v, 100*float64(l.Coalesced)/float64(max(1, l.Events)))
			}
			if cp.Errors > 0 {
				v = na
				detail += fmt.Sprintf("; %d errors: %s", cp.Errors, cp.FirstError)
			}
			add("stream: no chunk coalescing", rule, v, "<=", 0, "%", detail)
		}
	}

	// Streams at 4 000 rps (issue 32): time to first byte added over direct, p50 and
	// p99, within 2× what the floor adds; SSE events that reached the client merged
	// with the one before, no more than through the floor.
	{
		c := find(4000, "stream")
		notRun := "not run: -rates has no 4000 or -modes no stream"
		if c == nil {
			add("stream 4000 rps: added TTFB p50", "≤ 2× the floor's", na, "<=", na, "µs", notRun)
			add("stream 4000 rps: added TTFB p99", "≤ 2× the floor's", na, "<=", na, "µs", notRun)
			add("stream 4000 rps: merged events", "≤ the floor's", na, "<=", na, "events", notRun)
		} else {
			d, f, cp := c.Paths[0], c.Paths[1], c.Paths[2]
			errs := ""
			if cp.Errors+f.Errors+d.Errors > 0 {
				errs = fmt.Sprintf("; ERRORS direct %d floor %d camproxy %d", d.Errors, f.Errors, cp.Errors)
			}
			for _, q := range []struct {
				name           string
				direct, fa, ca float64
			}{{"p50", d.P50, f.AddedP50, cp.AddedP50}, {"p99", d.P99, f.AddedP99, cp.AddedP99}} {
				add("stream 4000 rps: added TTFB "+q.name, "≤ 2× the floor's", q.ca, "<=", 2*max(q.fa, 0), "µs",
					fmt.Sprintf("TTFB %s: direct %.0f µs; floor adds %+.0f µs, camproxy %+.0f µs (%.2fx the floor's); n=%d per path%s",
						q.name, q.direct, q.fa, q.ca, ratio(q.ca, q.fa), cp.N, errs))
			}
			add("stream 4000 rps: merged events", "≤ the floor's", float64(cp.Coalesced), "<=", float64(f.Coalesced), "events",
				fmt.Sprintf("SSE events that reached the client in the same read as the one before: camproxy %d, floor %d, direct %d, of %d each",
					cp.Coalesced, f.Coalesced, d.Coalesced, cp.Events))
		}
	}

	// Saturation: throughput and CPU per call against the floor's.
	if s := e.res.Saturation; len(s) == 3 {
		d, f, cp := s[0], s[1], s[2]
		add("saturation throughput vs floor", "≥ 70% of the floor's", 100*cp.RPS/f.RPS, ">=", 70, "%",
			fmt.Sprintf("camproxy %.0f req/s, floor %.0f req/s, direct %.0f req/s (%d callers back to back); errors camproxy %d floor %d",
				cp.RPS, f.RPS, d.RPS, e.o.satConns, cp.Errors, f.Errors))
		detail := fmt.Sprintf("+cpu/req at saturation = process CPU per call (getrusage user+sys) − direct path's: camproxy %+.0f µs, floor %+.0f µs (direct %.0f µs)",
			cp.AddedCPUPerReq, f.AddedCPUPerReq, d.CPUPerReq)
		if c := find(1000, "nonstream"); c != nil {
			detail += fmt.Sprintf("; at 1000 rps non-stream: %+.0f vs %+.0f µs = %.2fx", c.Paths[2].AddedCPUPerReq, c.Paths[1].AddedCPUPerReq,
				ratio(c.Paths[2].AddedCPUPerReq, c.Paths[1].AddedCPUPerReq))
		}
		add("CPU per call vs floor", "≤ 2× the floor's", ratio(cp.AddedCPUPerReq, f.AddedCPUPerReq), "<=", 2, "x", detail)
	} else {
		add("saturation throughput vs floor", "≥ 70% of the floor's", na, ">=", 70, "%", "not run (-skip saturation)")
		add("CPU per call vs floor", "≤ 2× the floor's", na, "<=", 2, "x", "not run (-skip saturation)")
	}

	// Allocations over the whole pipeline: proxy's BenchmarkPipeline, what camproxy
	// adds to the agent's and the upstream's own.
	{
		allocs, bytesX := na, na
		var aparts, bparts []string
		why := "not run (-skip pipeline)"
		if p := e.res.Pipeline; p != nil {
			why = "pipeline benchmark failed: " + firstLine(p.Error)
			for _, b := range p.pipeline() {
				a, x := b.Metrics["proxy-allocs/op"], b.Metrics["body-x"]
				if math.IsNaN(allocs) || a > allocs {
					allocs = a
				}
				if math.IsNaN(bytesX) || x > bytesX {
					bytesX = x
				}
				name := strings.TrimPrefix(b.Name, "BenchmarkPipeline/")
				aparts = append(aparts, fmt.Sprintf("%s %.1f", name, a))
				bparts = append(bparts, fmt.Sprintf("%s %.0f B = %.2f× its body", name, b.Metrics["proxy-B/op"], x))
			}
		}
		how := "the worse of go test -bench BenchmarkPipeline -benchmem ./proxy, camproxy's part (the call's minus the direct call's): "
		awhy, bwhy := why, why
		if len(aparts) > 0 {
			awhy, bwhy = how+strings.Join(aparts, ", "), how+strings.Join(bparts, ", ")
		}
		add("allocations per call", "≤ 30", allocs, "<=", 30, "allocs", awhy)
		add("bytes allocated per call ÷ body", "≤ 2× the body's bytes", bytesX, "<=", 2, "x", bwhy)
	}

	// Turn 60 against turn 1.
	if l := e.res.Long; l != nil {
		detail := fmt.Sprintf("camproxy's added time (its median − direct's, per turn; median of turns 1-3 and %d-%d): %.0f → %.0f µs; whole round trip %.0f → %.0f µs (%.2fx); %d episodes",
			l.Turns-2, l.Turns, l.AddedFirst, l.AddedLast, l.TotalFirst, l.TotalLast, ratio(l.TotalLast, l.TotalFirst), l.Episodes)
		if p := e.res.Pipeline; p != nil {
			if v, ok := p.metric("BenchmarkEpisodeTurnRatio", "proxy-t60/t1"); ok {
				detail += fmt.Sprintf("; in-process (go test BenchmarkEpisodeTurnRatio) added time %.2fx", v)
			}
		}
		add(fmt.Sprintf("turn %d vs turn 1: added time", l.Turns), "≤ 1.5× turn 1's", l.Ratio, "<=", 1.5, "x", detail)
	} else {
		add("turn 60 vs turn 1: added time", "≤ 1.5× turn 1's", na, "<=", 1.5, "x", "not run (-skip long)")
	}
	e.overloadTargets(add) // issue 32's overload row
	e.res.Targets = ts
	e.res.Checks = e.issue9Checks()

	if len(e.res.Checks) > 0 {
		e.printf("== issue 9's other checks ==\n")
		for _, c := range e.res.Checks {
			e.printf("%-4s %-40s %-52s %s\n", map[bool]string{true: "PASS", false: "MISS"}[c.Pass], c.Name, c.Target, c.Measured)
		}
		e.printf("\n")
	}
	e.printf("== targets (issues 17 and 32): every figure from this run ==\n")
	e.printf("%-4s  %-34s %12s  %-18s %s\n", "", "target", "measured", "bound", "how")
	pass := 0
	for _, t := range ts {
		bound := t.Rule
		if t.Status != "N/A" {
			op := map[string]string{"<=": "≤", ">=": "≥"}[t.Cmp]
			bound = op + " " + fmtVal(t.Bound, t.Unit)
			if t.Unit == "%" && t.Cmp == "<=" && t.Bound == 0 {
				bound = "= 0%"
			}
		}
		v := "—"
		if t.Status != "N/A" {
			v = fmtVal(t.Value, t.Unit)
		}
		if t.Pass {
			pass++
		}
		e.printf("%-4s  %-34s %12s  %-18s %s\n", t.Status, t.Name, v, bound, t.Detail)
	}
	e.printf("%d of %d targets pass\n", pass, len(ts))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// issue9Checks are issue 9's checks that issue 17 does not restate.
func (e *env) issue9Checks() []Check {
	var checks []Check
	add := func(name, target, measured string, pass bool) {
		checks = append(checks, Check{Name: name, Target: target, Measured: measured, Pass: pass})
	}
	for _, c := range e.res.Cells {
		if c.Rate == 1000 && c.Mode == "nonstream" && len(c.Paths) > 3 {
			cp, nr := c.Paths[2], c.Paths[3]
			d50, d99 := cp.P50-nr.P50, cp.P99-nr.P99
			add("recording: no measurable added latency", "recording on − off ≤ 25 µs p50 (run-to-run noise)",
				fmt.Sprintf("p50 %+.0f µs, p99 %+.0f µs", d50, d99), d50 <= 25)
		}
	}
	if i := slices.IndexFunc(e.res.Lockstep, func(l LockResult) bool { return l.Path == "camproxy" }); i >= 0 {
		l := e.res.Lockstep[i]
		add("streaming: no chunk held back (lockstep)", "every chunk reaches the client before the next is sent",
			fmt.Sprintf("%d of %d chunks held back, %d errors", l.Coalesced, l.Chunks, l.Errors), l.Coalesced == 0 && l.Errors == 0 && l.Chunks > 0)
	}
	for _, r := range e.res.Idle {
		if r.Proxy == "camproxy" {
			v := r.RSSMiB
			how := fmt.Sprintf("RSS %.0f MiB at %d streams", r.RSSMiB, r.Streams)
			if r.Streams < 10000 {
				v = r.Projected10k
				how += fmt.Sprintf(", %.0f MiB projected at 10 000", v)
			}
			add("10 000 concurrent idle streams", "RSS < 1 GiB", how, v < 1024 && r.Failed == 0)
		}
	}
	if r := e.res.Recording; r != nil {
		inSink := r.PacedWritten + r.PacedFromSpool
		paced := inSink == int(r.PacedRate*2) && r.PacedLagMs < 1000
		add("recording rate to the file sink", "≥ 20 000 steps/s sustained",
			fmt.Sprintf("%.0f/s for 2 s: %d/%d in the sink %.0f ms after the last (%d via the spool); ceiling %.0f/s",
				r.PacedRate, inSink, int(r.PacedRate*2), r.PacedLagMs, r.PacedSpooled, r.StepsPerSec), paced && r.PacedRate >= 20000)
	}
	if d := e.res.Drain; d != nil {
		add("memory flat over a long run", "episode store empty once episodes idle out",
			fmt.Sprintf("%d→%d episodes, %d→%d tips; live heap %.0f→%.0f MiB", d.EpisodesLive, d.EpisodesAfter, d.TipsLive, d.TipsAfter, d.HeapLiveMiB, d.HeapAfterMiB),
			d.EpisodesAfter == 0 && d.TipsAfter == 0)
	}
	return checks
}
