package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// exitFound is govulncheck's exit code for a reachable vulnerable symbol.
const exitFound = 3

// message is one value of govulncheck's JSON stream; exactly one field is set.
// Only the fields the gate reads are declared.
type message struct {
	Config *struct {
		ScanMode string `json:"scan_mode"`
	} `json:"config"`
	OSV     *osv     `json:"osv"`
	Finding *finding `json:"finding"`
}

type osv struct {
	ID      string `json:"id"`
	Summary string `json:"summary"`
}

type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"`
}

// frame is one step of a finding's trace, the vulnerable end first.
type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
}

func (f frame) symbol() string {
	name := f.Function
	if f.Receiver != "" {
		name = strings.TrimPrefix(f.Receiver, "*") + "." + name
	}
	if f.Package == "" {
		return name
	}
	return f.Package + "." + name
}

// level says how close a finding is to the code: govulncheck sends one finding
// per level it reached, the trace's first frame naming a function only when the
// vulnerable symbol is reachable.
type level int

const (
	moduleLevel level = iota
	packageLevel
	symbolLevel
)

func (f *finding) level() level {
	if len(f.Trace) == 0 {
		return moduleLevel
	}
	switch {
	case f.Trace[0].Function != "":
		return symbolLevel
	case f.Trace[0].Package != "":
		return packageLevel
	}
	return moduleLevel
}

// vuln is one vulnerability as the summary shows it: the closest level any of its
// findings reached, and the shortest symbol trace.
type vuln struct {
	id, summary   string
	module, fixed string
	version       string
	level         level
	trace         []frame
}

func (v *vuln) stdlib() bool { return v.module == "stdlib" || v.module == "toolchain" }

// read decodes the stream into vulnerabilities by ID.
func read(r io.Reader) (map[string]*vuln, error) {
	dec := json.NewDecoder(r)
	vulns := map[string]*vuln{}
	summaries := map[string]string{}
	sawConfig := false
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		switch {
		case m.Config != nil:
			sawConfig = true
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil:
			f := m.Finding
			if f.OSV == "" || len(f.Trace) == 0 {
				return nil, fmt.Errorf("a finding without an ID or a trace: %+v", *f)
			}
			v := vulns[f.OSV]
			if v == nil {
				v = &vuln{id: f.OSV, module: f.Trace[0].Module, version: f.Trace[0].Version, level: -1}
				vulns[f.OSV] = v
			}
			lv := f.level()
			if lv > v.level || (lv == v.level && len(f.Trace) < len(v.trace)) {
				v.level, v.trace, v.fixed = lv, f.Trace, f.FixedVersion
			}
		}
	}
	if !sawConfig {
		return nil, errors.New("no config message: this is not govulncheck -format json output")
	}
	for id, v := range vulns {
		v.summary = summaries[id]
	}
	return vulns, nil
}

func run(args []string, in io.Reader, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("vulngate", flag.ContinueOnError)
	fs.SetOutput(out)
	stdlib := fs.String("stdlib", "fail", "fail|report: whether a reachable vulnerability in the Go standard library fails")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if *stdlib != "fail" && *stdlib != "report" {
		return 0, fmt.Errorf("-stdlib %q: want fail or report", *stdlib)
	}
	vulns, err := read(in)
	if err != nil {
		return 0, err
	}
	return report(vulns, *stdlib == "fail", out), nil
}

// report prints the summary and returns the exit code.
func report(vulns map[string]*vuln, failStdlib bool, out io.Writer) int {
	var failing, stdReported, informational []*vuln
	for _, v := range vulns {
		switch {
		case v.level != symbolLevel:
			informational = append(informational, v)
		case v.stdlib() && !failStdlib:
			stdReported = append(stdReported, v)
		default:
			failing = append(failing, v)
		}
	}
	for _, s := range [][]*vuln{failing, stdReported, informational} {
		slices.SortFunc(s, func(a, b *vuln) int { return cmp.Or(cmp.Compare(a.module, b.module), cmp.Compare(a.id, b.id)) })
	}
	if len(failing) > 0 {
		fmt.Fprintf(out, "vulncheck: FAIL: %d known vulnerabilities reachable from the code:\n", len(failing))
		for _, v := range failing {
			v.print(out, true)
		}
	}
	if len(stdReported) > 0 {
		fmt.Fprintf(out, "vulncheck: the Go standard library (%s) has %d reachable known vulnerabilities, fixed in %s; reported, not failed (-stdlib=report): build releases with that Go or newer\n",
			stdReported[0].version, len(stdReported), newest(stdReported))
		for _, v := range stdReported {
			v.print(out, true)
		}
	}
	if len(informational) > 0 {
		fmt.Fprintf(out, "vulncheck: %d more in packages imported or modules required whose vulnerable code is never called (informational):\n", len(informational))
		for _, v := range informational {
			v.print(out, false)
		}
	}
	if len(failing) > 0 {
		fmt.Fprintln(out, "vulncheck: upgrade each module (go get MODULE@FIXED) or Go to the version named as fixed")
		return exitFound
	}
	fmt.Fprintf(out, "vulncheck: ok: no reachable known vulnerability fails the build (%d reported)\n", len(stdReported)+len(informational))
	return 0
}

// newest is the highest fixed version among vs (Go versions compare as semver here).
func newest(vs []*vuln) string {
	best := ""
	for _, v := range vs {
		if v.fixed != "" && (best == "" || semver.Compare(best, v.fixed) < 0) {
			best = v.fixed
		}
	}
	if best == "" {
		return "no released version"
	}
	return best
}

func (v *vuln) print(out io.Writer, withTrace bool) {
	fixed := v.fixed
	if fixed == "" {
		fixed = "not fixed yet"
	} else {
		fixed = "fixed in " + fixed
	}
	fmt.Fprintf(out, "  %s  %s@%s (%s)  %s\n", v.id, v.module, v.version, fixed, v.summary)
	if !withTrace {
		return
	}
	// The trace runs from the vulnerable symbol to the code's entry; print it the
	// way one reads a call: caller first.
	var steps []string
	for i := len(v.trace) - 1; i >= 0; i-- {
		steps = append(steps, v.trace[i].symbol())
	}
	fmt.Fprintf(out, "      %s\n", strings.Join(steps, " → "))
}
