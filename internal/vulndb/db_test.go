package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

const record = `{
  "schema_version": "1.3.1",
  "id": "GO-2022-1059",
  "modified": "0001-01-01T00:00:00Z",
  "published": "0001-01-01T00:00:00Z",
  "aliases": ["CVE-2022-32149"],
  "affected": [{
    "package": {"name": "golang.org/x/text", "ecosystem": "Go"},
    "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "0.3.8"}]}],
    "ecosystem_specific": {"imports": [{"path": "golang.org/x/text/language", "symbols": ["ParseAcceptLanguage"]}]}
  }]
}`

var at = time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)

func TestParsePin(t *testing.T) {
	p, err := parsePin("# comment\n\ngolang.org/x/vulndb v0.0.0-20261105234957-e22db6528018 h1:abc=\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != "v0.0.0-20261105234957-e22db6528018" || p.Sum != "h1:abc=" || !p.Time.Equal(at) {
		t.Errorf("parsePin = %+v", p)
	}
	for _, bad := range []string{
		"",
		"golang.org/x/vuln v0.0.0-20261105234957-e22db6528018 h1:abc=",
		"golang.org/x/vulndb v1.0.0 h1:abc=",                           // no time in a tag
		"golang.org/x/vulndb v0.0.0-20261105234957-e22db6528018",       // no hash
		"golang.org/x/vulndb v0.0.0-20261105234957-e22db6528018 sha:x", // not go.sum's
		"golang.org/x/vulndb ../../etc h1:abc=",
		"golang.org/x/vulndb v0.0.0-20261105234957-e22db6528018 h1:a\ngolang.org/x/vulndb v0.0.0-20261105234957-e22db6528018 h1:b",
	} {
		if _, err := parsePin(bad); err == nil {
			t.Errorf("parsePin(%q) accepted", bad)
		}
	}
}

// TestBuild: the layout govulncheck's file:// client reads, the zero times stamped
// with the pinned commit's, and the same bytes from the same records.
func TestBuild(t *testing.T) {
	src := t.TempDir()
	osv := filepath.Join(src, "data", "osv")
	if err := os.MkdirAll(osv, 0o755); err != nil {
		t.Fatal(err)
	}
	later := strings.Replace(strings.Replace(record, "GO-2022-1059", "GO-2023-0001", 1), `"modified": "0001-01-01T00:00:00Z"`, `"modified": "2027-01-02T03:04:05Z"`, 1)
	for id, b := range map[string]string{"GO-2022-1059": record, "GO-2023-0001": later} {
		if err := os.WriteFile(filepath.Join(osv, id+".json"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := pin{Version: "v0.0.0-20261105234957-e22db6528018", Time: at}
	cache := t.TempDir()
	dir, err := ensure(context.Background(), p, cache, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(cache, p.Version) {
		t.Errorf("database in %s", dir)
	}
	var db struct{ Modified time.Time }
	readJSON(t, filepath.Join(dir, "index", "db.json"), &db)
	if want := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC); !db.Modified.Equal(want) {
		t.Errorf("db.json modified %v, want the newest record's %v", db.Modified, want)
	}
	var modules []struct {
		Path  string
		Vulns []moduleVuln
	}
	readJSON(t, filepath.Join(dir, "index", "modules.json"), &modules)
	if len(modules) != 1 || modules[0].Path != "golang.org/x/text" || len(modules[0].Vulns) != 2 ||
		modules[0].Vulns[0] != (moduleVuln{ID: "GO-2022-1059", Modified: at, Fixed: "0.3.8"}) {
		t.Errorf("modules.json = %+v", modules)
	}
	var e map[string]any
	readJSON(t, filepath.Join(dir, "ID", "GO-2022-1059.json"), &e)
	if e["modified"] != "2026-11-05T23:49:57Z" || e["published"] != "2026-11-05T23:49:57Z" || e["ecosystem_specific"] != nil {
		t.Errorf("GO-2022-1059.json stamped %v %v", e["modified"], e["published"])
	}
	if e["affected"].([]any)[0].(map[string]any)["ecosystem_specific"] == nil {
		t.Error("the record lost its symbols")
	}

	// Cached: a second call builds nothing (no source, no downloader).
	if again, err := ensure(context.Background(), p, cache, "", nil); err != nil || again != dir {
		t.Errorf("cached ensure = %s, %v", again, err)
	}
	// Deterministic: the same records give the same bytes.
	other, err := ensure(context.Background(), p, t.TempDir(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index/db.json", "index/modules.json", "index/vulns.json", "ID/GO-2022-1059.json"} {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(other, f))
		if string(a) != string(b) {
			t.Errorf("%s differs between two builds", f)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Errorf("the cache holds %v: a build directory was left behind", ents)
	}
}

type failingDownloader struct{}

func (failingDownloader) Download(context.Context, pin) (string, error) {
	return "", errors.New("offline")
}

func TestBuildDownloadFails(t *testing.T) {
	p := pin{Version: "v0.0.0-20261105234957-e22db6528018", Time: at}
	if _, err := ensure(context.Background(), p, t.TempDir(), "", failingDownloader{}); err == nil || !strings.Contains(err.Error(), "offline") {
		t.Errorf("ensure = %v, want the download's error", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"empty":      {},
		"misnamed":   {"GO-2022-0001.json": {Data: []byte(record)}},
		"path in id": {"x.json": {Data: []byte(`{"id": "../../x"}`)}},
		"not json":   {"GO-2022-1059.json": {Data: []byte(`{`)}},
		"no module":  {"GO-2022-1059.json": {Data: []byte(`{"id": "GO-2022-1059", "affected": [{"package": {}}]}`)}},
	} {
		if _, err := load(fsys, at); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

func TestNonSupersededFix(t *testing.T) {
	r := func(events ...[2]string) osvRange {
		var o osvRange
		for _, e := range events {
			o.Events = append(o.Events, struct {
				Introduced string `json:"introduced"`
				Fixed      string `json:"fixed"`
			}{e[0], e[1]})
		}
		o.Type = "SEMVER"
		return o
	}
	for _, c := range []struct {
		ranges []osvRange
		want   string
	}{
		{[]osvRange{r([2]string{"0", ""}, [2]string{"", "0.3.8"})}, "0.3.8"},
		{[]osvRange{r([2]string{"0", ""}, [2]string{"", "1.2.0"}, [2]string{"1.3.0", ""}, [2]string{"", "1.10.1"})}, "1.10.1"},
		{[]osvRange{r([2]string{"0", ""}, [2]string{"", "1.2.0"}, [2]string{"2.0.0", ""})}, ""}, // introduced again, unfixed
		{[]osvRange{r([2]string{"0", ""})}, ""},
		{[]osvRange{{Type: "GIT"}}, ""},
		{[]osvRange{r([2]string{"0", ""}, [2]string{"", "1.21.0-0"}), r([2]string{"", "1.20.5"})}, "1.21.0-0"},
	} {
		if got := nonSupersededFix(c.ranges); got != c.want {
			t.Errorf("nonSupersededFix(%+v) = %q, want %q", c.ranges, got, c.want)
		}
	}
}

// FuzzParseEntry: a record is untrusted bytes (a bumped pin brings new ones); no
// input panics, and an accepted record has an ID that is a file name and stamped times.
func FuzzParseEntry(f *testing.F) {
	f.Add([]byte(record))
	f.Add([]byte(`{"id":"GO-2024-0001","modified":"2025-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"id":"GO-2024-0001","affected":[{"package":{"name":"m"},"ranges":[{"type":"SEMVER","events":[{"fixed":"x"}]}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, raw, err := parseEntry(b, at)
		if err != nil {
			return
		}
		if strings.ContainsAny(e.ID, `/\.`) || e.Modified.IsZero() || e.Published.IsZero() || !json.Valid(raw) {
			t.Fatalf("accepted %+v %s", e, raw)
		}
		for _, a := range e.Affected {
			nonSupersededFix(a.Ranges)
		}
	})
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestModuleOnceARecord: a record that lists one module in several affected blocks
// gives one index row, fixed only past every block.
func TestModuleOnceARecord(t *testing.T) {
	two := `{"id":"GO-2026-0001","affected":[
	  {"package":{"name":"m"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.2.0"}]}]},
	  {"package":{"name":"m"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.10.0"}]}]},
	  {"package":{"name":"n"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.0.0"}]}]},
	  {"package":{"name":"n"},"ranges":[{"type":"SEMVER","events":[{"introduced":"1.5.0"}]}]}]}`
	db, err := load(fstest.MapFS{"GO-2026-0001.json": {Data: []byte(two)}}, at)
	if err != nil {
		t.Fatal(err)
	}
	if m := db.modules["m"]; len(m) != 1 || m[0].Fixed != "1.10.0" {
		t.Errorf("m: %+v, want one row fixed in 1.10.0", m)
	}
	if n := db.modules["n"]; len(n) != 1 || n[0].Fixed != "" {
		t.Errorf("n: %+v, want one row never fixed", n)
	}
}
