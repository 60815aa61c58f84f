package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The allocation targets (≤ 30 allocations and ≤ 2× the body's bytes per call) are
// read from proxy's own whole-pipeline benchmark, run as a `go test` subprocess rather
// than rebuilt here: the benchmark and its in-memory harness (a proxy.Server and a
// fasthttp upstream on fasthttputil.InmemoryListeners, dialed through a hook only
// the package's tests can reach) live in proxy's _test files, the package's owners
// keep them in step with the pipeline, and the issue names exactly that `go test
// -bench -benchmem`; a copy here would drift. Allocation counts do not depend on
// machine noise, so a process of its own costs nothing in comparability; it runs
// after the latency measurements so that its CPU does not disturb them.

// pipelinePkg and pipelineBench select the benchmarks: BenchmarkPipeline (turn 1 of
// a new episode, turn 20 of a known one) for the allocation targets, and
// BenchmarkEpisodeTurnRatio (turn 60 against turn 1 in-process) beside the load's
// long-episode figure.
const (
	pipelinePkg   = "github.com/camproxy/camproxy/proxy"
	pipelineBench = "^(BenchmarkPipeline|BenchmarkEpisodeTurnRatio)$"
)

// PipelineResult is one run of the pipeline benchmarks.
type PipelineResult struct {
	Command    string      `json:"command"`
	Seconds    float64     `json:"seconds"`
	Benchmarks []BenchLine `json:"benchmarks"`
	Error      string      `json:"error,omitempty"`
}

// BenchLine is one benchmark's result line: its metrics by unit (ns/op, B/op,
// allocs/op and the benchmark's own: proxy-allocs/op, proxy-B/op, body-x,
// proxy-ns/op, proxy-t60/t1 …).
type BenchLine struct {
	Name    string             `json:"name"`
	N       int64              `json:"n"`
	Metrics map[string]float64 `json:"metrics"`
}

// pipeline returns the BenchmarkPipeline lines (the allocation targets' calls).
func (p *PipelineResult) pipeline() []BenchLine {
	var out []BenchLine
	for _, b := range p.Benchmarks {
		if strings.HasPrefix(b.Name, "BenchmarkPipeline/") {
			out = append(out, b)
		}
	}
	return out
}

// metric is the first benchmark's value of unit whose name has prefix.
func (p *PipelineResult) metric(prefix, unit string) (float64, bool) {
	for _, b := range p.Benchmarks {
		if strings.HasPrefix(b.Name, prefix) {
			v, ok := b.Metrics[unit]
			return v, ok
		}
	}
	return 0, false
}

func runPipelineBench(benchTime string) *PipelineResult {
	args := []string{"test", "-run", "^$", "-bench", pipelineBench, "-benchmem", "-benchtime", benchTime, "-count", "1", pipelinePkg}
	res := &PipelineResult{Command: "go " + strings.Join(args, " ")}
	gobin, err := exec.LookPath("go")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, gobin, args...).CombinedOutput()
	res.Seconds = time.Since(start).Seconds()
	res.Benchmarks = parseBench(out)
	if err != nil || len(res.pipeline()) == 0 {
		tail := out
		if len(tail) > 1500 {
			tail = tail[len(tail)-1500:]
		}
		res.Error = fmt.Sprintf("%v: %s", err, bytes.TrimSpace(tail))
	}
	return res
}

// procSuffix is the -GOMAXPROCS suffix go test appends to a benchmark's name.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parseBench reads go test's benchmark lines: name, iterations, then value-unit pairs.
func parseBench(out []byte) []BenchLine {
	var lines []BenchLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		b := BenchLine{Name: procSuffix.ReplaceAllString(f[0], ""), N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		lines = append(lines, b)
	}
	return lines
}

func (e *env) printPipeline() {
	p := e.res.Pipeline
	e.printf("== the whole pipeline per call, in-process (%s; %.0fs) ==\n", p.Command, p.Seconds)
	for _, b := range p.Benchmarks {
		m := b.Metrics
		if strings.HasPrefix(b.Name, "BenchmarkEpisodeTurnRatio") {
			e.printf("%-42s t1 %.0f µs, t60 %.0f µs: whole call t60/t1 %.2fx, camproxy's added time t60/t1 %.2fx\n",
				b.Name, m["t1-ns"]/1e3, m["t60-ns"]/1e3, m["t60/t1"], m["proxy-t60/t1"])
			continue
		}
		e.printf("%-42s %7.0f allocs/op %9.0f B/op; camproxy adds %6.1f allocs, %8.0f B = %.2f× the body, %.0f µs\n",
			b.Name, m["allocs/op"], m["B/op"], m["proxy-allocs/op"], m["proxy-B/op"], m["body-x"], m["proxy-ns/op"]/1e3)
	}
	if p.Error != "" {
		e.printf("pipeline benchmark failed: %s\n", p.Error)
	}
	e.printf("\n")
}
