package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/internal/buildinfo"
)

// TestVersionCommand: what -X main.version stamps is what every form prints.
func TestVersionCommand(t *testing.T) {
	old := version
	version = "v7.7.7-test"
	t.Cleanup(func() { version = old })
	cases := []struct {
		args  []string
		code  int
		check func(out string) bool
	}{
		{[]string{"version"}, 0, func(out string) bool {
			return strings.HasPrefix(out, "camproxy v7.7.7-test\n") && strings.Contains(out, runtime.Version()) &&
				strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) && strings.Contains(out, "commit:")
		}},
		{[]string{"version", "--json"}, 0, func(out string) bool {
			var b buildinfo.Info
			return json.Unmarshal([]byte(out), &b) == nil && b.Version == "v7.7.7-test" && b.Go != "" && b.Commit != ""
		}},
		{[]string{"--version"}, 0, func(out string) bool {
			return strings.Count(out, "\n") == 1 && strings.HasPrefix(out, "camproxy v7.7.7-test (commit ")
		}},
		{[]string{"version", "extra"}, 2, func(string) bool { return true }},
		{[]string{"version", "--yaml"}, 2, func(string) bool { return true }},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, nil, c.args...)
			if code != c.code || !c.check(out) {
				t.Errorf("exit %d (want %d):\n%s%s", code, c.code, out, errs)
			}
		})
	}
}
