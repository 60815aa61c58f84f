package buildinfo

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	cases := []struct {
		name             string
		bi               *debug.BuildInfo
		version, commit  string // stamped with -X
		want             Info
		textHas, textNot []string
	}{
		{name: "make build: stamped, from a clean checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/camproxy/camproxy", Version: "(devel)"},
				Settings: settings("vcs.revision", "0123abcd", "vcs.time", "2026-11-20T10:00:00Z", "vcs.modified", "false", "CGO_ENABLED", "0", "-trimpath", "true")},
			version: "v1.4.0",
			want: Info{Version: "v1.4.0", Commit: "0123abcd", CommitTime: "2026-11-20T10:00:00Z", Go: "go1.26.8",
				Module: "github.com/camproxy/camproxy", Build: map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"}},
			textHas: []string{"camproxy v1.4.0\n", "commit:   0123abcd (2026-11-20T10:00:00Z)", "go:       go1.26.8", "build:    -trimpath CGO_ENABLED=0"},
			textNot: []string{"uncommitted"}},
		{name: "a tree with changes",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Settings: settings("vcs.revision", "0123abcd", "vcs.modified", "true")},
			version: "dev",
			want:    Info{Version: "dev", Commit: "0123abcd", Modified: true, Go: "go1.26.8"},
			textHas: []string{"camproxy dev\n", "0123abcd (with uncommitted changes)"}},
		{name: "go install module@version: the module's version",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/camproxy/camproxy", Version: "v1.5.2"}},
			version: "dev",
			want:    Info{Version: "v1.5.2", Commit: "unknown", Go: "go1.26.8", Module: "github.com/camproxy/camproxy"},
			textHas: []string{"camproxy v1.5.2\n", "commit:   unknown"}},
		{name: "a stamped version wins over the module's",
			bi:      &debug.BuildInfo{Main: debug.Module{Version: "v1.5.2"}},
			version: "v9.0.0",
			want:    Info{Version: "v9.0.0", Commit: "unknown", Go: runtime.Version()}},
		{name: "Docker build: no VCS, commit stamped",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Settings: settings("-buildmode", "exe")},
			version: "v1.4.0", commit: "feedbeef",
			want:    Info{Version: "v1.4.0", Commit: "feedbeef", Go: "go1.26.8", Build: map[string]string{"-buildmode": "exe"}},
			textHas: []string{"commit:   feedbeef", "build:    -buildmode=exe"}},
		{name: "no build info at all", bi: nil, version: "dev",
			want: Info{Version: "dev", Commit: "unknown", Go: runtime.Version()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Read(c.bi, c.version, c.commit)
			c.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(c.want)
			if string(gj) != string(wj) {
				t.Errorf("got  %s\nwant %s", gj, wj)
			}
			text := got.Text()
			for _, s := range c.textHas {
				if !strings.Contains(text, s) {
					t.Errorf("text lacks %q:\n%s", s, text)
				}
			}
			for _, s := range c.textNot {
				if strings.Contains(text, s) {
					t.Errorf("text has %q:\n%s", s, text)
				}
			}
		})
	}
}
