package main

import (
	"bytes"
	"strings"
	"testing"
)

// The messages as govulncheck v1.9.0 writes them with -format json (one finding per
// level reached: module, package, then symbol with the trace to the caller).
const (
	config    = `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck","scanner_version":"v1.9.0","db":"file:///x","go_version":"go1.26.8","scan_level":"symbol","scan_mode":"source"}}`
	progress  = `{"progress":{"message":"Scanning your code and 12 packages across 3 dependent modules for known vulnerabilities..."}}`
	textOSV   = `{"osv":{"schema_version":"1.3.1","id":"GO-2022-1059","summary":"Denial of service via crafted Accept-Language header in golang.org/x/text/language","affected":[]}}`
	textMod   = `{"finding":{"osv":"GO-2022-1059","fixed_version":"v0.3.8","trace":[{"module":"golang.org/x/text","version":"v0.3.7"}]}}`
	textPkg   = `{"finding":{"osv":"GO-2022-1059","fixed_version":"v0.3.8","trace":[{"module":"golang.org/x/text","version":"v0.3.7","package":"golang.org/x/text/language"}]}}`
	textSym   = `{"finding":{"osv":"GO-2022-1059","fixed_version":"v0.3.8","trace":[{"module":"golang.org/x/text","version":"v0.3.7","package":"golang.org/x/text/language","function":"ParseAcceptLanguage","position":{"line":1}},{"module":"example.com/fixture","package":"example.com/fixture/reached","function":"main","position":{"line":9}}]}}`
	stdOSV    = `{"osv":{"id":"GO-2026-4601","summary":"Excess memory use in net/http"}}`
	stdSym    = `{"finding":{"osv":"GO-2026-4601","fixed_version":"v1.26.10","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"ReadRequest"},{"module":"github.com/camproxy/camproxy","package":"github.com/camproxy/camproxy/admin","function":"serve","receiver":"*Server"}]}}`
	std2Sym   = `{"finding":{"osv":"GO-2026-4590","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"crypto/tls","function":"Handshake","receiver":"*Conn"}]}}`
	stdPkgOnl = `{"finding":{"osv":"GO-2026-4000","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"archive/zip"}]}}`
)

func lines(msgs ...string) string { return strings.Join(msgs, "\n") + "\n" }

func TestGate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		args      []string
		code      int
		want, not []string
	}{
		{name: "a reachable module vulnerability fails with its trace, caller first",
			in: lines(config, progress, textOSV, textMod, textPkg, textSym), code: 3,
			want: []string{"FAIL: 1 known", "GO-2022-1059  golang.org/x/text@v0.3.7 (fixed in v0.3.8)  Denial of service",
				"example.com/fixture/reached.main → golang.org/x/text/language.ParseAcceptLanguage"},
			not: []string{"informational"}},
		{name: "imported, never called: listed, passes",
			in: lines(config, textOSV, textMod, textPkg), code: 0,
			want: []string{"1 more in packages imported", "GO-2022-1059", "ok: no reachable"}, not: []string{"FAIL"}},
		{name: "the standard library fails by default, naming the newest fix",
			in: lines(config, stdOSV, stdSym, std2Sym), code: 3,
			want: []string{"FAIL: 2 known", "github.com/camproxy/camproxy/admin.Server.serve → net/http.ReadRequest", "crypto/tls.Conn.Handshake"}},
		{name: "the standard library with -stdlib=report: reported with the Go that fixes it, passes",
			in: lines(config, stdOSV, stdSym, std2Sym, stdPkgOnl), args: []string{"-stdlib", "report"}, code: 0,
			want: []string{"standard library (v1.26.8) has 2 reachable", "fixed in v1.26.10", "Excess memory use", "1 more in packages imported"},
			not:  []string{"FAIL"}},
		{name: "-stdlib=report does not excuse a module",
			in: lines(config, textOSV, textSym, stdSym), args: []string{"-stdlib", "report"}, code: 3,
			want: []string{"FAIL: 1 known", "GO-2022-1059", "standard library (v1.26.8) has 1"}},
		{name: "nothing found",
			in: lines(config, progress), code: 0, want: []string{"ok: no reachable known vulnerability fails the build (0 reported)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code, err := run(tc.args, strings.NewReader(tc.in), &out)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, &out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, &out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, &out)
				}
			}
		})
	}
}

func TestGateRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		args []string
		want string
	}{
		"text output, not JSON":   {in: "=== Symbol Results ===\n", want: "reading govulncheck's JSON"},
		"no config message":       {in: lines(textOSV, textSym), want: "not govulncheck -format json"},
		"a finding with no trace": {in: lines(config, `{"finding":{"osv":"GO-1"}}`), want: "without an ID or a trace"},
		"an unknown -stdlib":      {in: lines(config), args: []string{"-stdlib", "ignore"}, want: `-stdlib "ignore"`},
		"cut short":               {in: config[:40], want: "reading govulncheck's JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := run(tc.args, strings.NewReader(tc.in), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// FuzzGate: any bytes on stdin give an error or a decision, never a panic, and a
// decision to pass never hides a reachable module vulnerability.
func FuzzGate(f *testing.F) {
	f.Add([]byte(lines(config, textOSV, textMod, textPkg, textSym)))
	f.Add([]byte(lines(config, stdSym, stdPkgOnl)))
	f.Add([]byte(`{"config":{}}{"finding":{"osv":"x","trace":[{}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		vulns, err := read(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out bytes.Buffer
		code := report(vulns, false, &out)
		for _, v := range vulns {
			if v.level == symbolLevel && !v.stdlib() && code != exitFound {
				t.Fatalf("%s reachable in %s, exit %d", v.id, v.module, code)
			}
		}
	})
}
