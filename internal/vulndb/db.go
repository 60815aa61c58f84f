package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// downloader brings the pinned vulndb module into the module cache.
type downloader interface {
	Download(ctx context.Context, p pin) (dir string, err error)
}

// ensure returns the absolute directory of the database built from p under cache,
// building it first when it is not there. src, when set, is a vulndb source tree to
// build from instead of the pinned module.
func ensure(ctx context.Context, p pin, cache, src string, d downloader) (string, error) {
	cache, err := filepath.Abs(cache)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, p.Version)
	if fileExists(filepath.Join(dir, "index", "modules.json")) {
		return dir, nil
	}
	if src == "" {
		if src, err = d.Download(ctx, p); err != nil {
			return "", err
		}
	}
	db, err := load(os.DirFS(filepath.Join(src, "data", "osv")), p.Time)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Written beside and renamed into place: a reader (or a concurrent build: make
	// check and the test suite may race) sees a whole database or none.
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := db.write(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if fileExists(filepath.Join(dir, "index", "modules.json")) {
			return dir, nil // another build got there first
		}
		return "", fmt.Errorf("placing the database: %w", err)
	}
	return dir, nil
}

// database is the v1 API's content: the OSV records by ID and the two indexes
// govulncheck reads first.
type database struct {
	modified time.Time
	entries  map[string]json.RawMessage // ID → the record as written
	modules  map[string][]moduleVuln
	vulns    []vuln
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

type vuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

// load reads every GO-*.json record in osvDir.
func load(osvDir fs.FS, at time.Time) (*database, error) {
	names, err := fs.Glob(osvDir, "*.json")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("no OSV records in data/osv")
	}
	db := &database{entries: map[string]json.RawMessage{}, modules: map[string][]moduleVuln{}}
	for _, name := range names {
		b, err := fs.ReadFile(osvDir, name)
		if err != nil {
			return nil, err
		}
		e, raw, err := parseEntry(b, at)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if name != e.ID+".json" {
			return nil, fmt.Errorf("%s holds %s", name, e.ID)
		}
		db.add(e, raw)
	}
	return db, nil
}

func (db *database) add(e entry, raw json.RawMessage) {
	db.entries[e.ID] = raw
	db.modified = maxTime(db.modified, e.Modified)
	db.vulns = append(db.vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
	// One index row per module and record: a record may list a module in several
	// affected blocks, and then no version is safe unless it is past every block's fix.
	fixed := map[string]string{}
	var order []string
	for _, a := range e.Affected {
		f := nonSupersededFix(a.Ranges)
		prev, seen := fixed[a.Package.Name]
		switch {
		case !seen:
			order = append(order, a.Package.Name)
		case prev == "" || f == "":
			f = ""
		case semver.Compare(canon(prev), canon(f)) > 0:
			f = prev
		}
		fixed[a.Package.Name] = f
	}
	for _, m := range order {
		db.modules[m] = append(db.modules[m], moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: fixed[m]})
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// write lays the database out under dir, sorted, so one pin always gives the same bytes.
func (db *database) write(dir string) error {
	type module struct {
		Path  string       `json:"path"`
		Vulns []moduleVuln `json:"vulns"`
	}
	var modules []module
	for path, vs := range db.modules {
		slices.SortFunc(vs, func(a, b moduleVuln) int { return cmp.Compare(a.ID, b.ID) })
		modules = append(modules, module{Path: path, Vulns: vs})
	}
	slices.SortFunc(modules, func(a, b module) int { return cmp.Compare(a.Path, b.Path) })
	slices.SortFunc(db.vulns, func(a, b vuln) int { return cmp.Compare(a.ID, b.ID) })
	files := map[string]any{
		"index/db.json": struct {
			Modified time.Time `json:"modified"`
		}{db.modified},
		"index/modules.json": modules,
		"index/vulns.json":   db.vulns,
	}
	for id, raw := range db.entries {
		files["ID/"+id+".json"] = raw
	}
	for _, sub := range []string{"index", "ID"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	for name, v := range files {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// entry is what the indexes need of an OSV record.
type entry struct {
	ID        string    `json:"id"`
	Modified  time.Time `json:"modified"`
	Published time.Time `json:"published"`
	Aliases   []string  `json:"aliases"`
	Affected  []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []osvRange `json:"ranges"`
	} `json:"affected"`
}

type osvRange struct {
	Type   string `json:"type"`
	Events []struct {
		Introduced string `json:"introduced"`
		Fixed      string `json:"fixed"`
	} `json:"events"`
}

// idPattern is the database's own IDs; an ID names a file, so nothing else passes.
var idPattern = regexp.MustCompile(`^GO-[0-9]{4}-[0-9]{4,}$`)

// parseEntry reads one OSV record and stamps it: the repository's records carry zero
// times (the public database takes them from the git history, which a module zip
// lacks), so a zero modified or published time becomes the pinned commit's time, at.
func parseEntry(b []byte, at time.Time) (entry, json.RawMessage, error) {
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return entry{}, nil, err
	}
	if !idPattern.MatchString(e.ID) {
		return entry{}, nil, fmt.Errorf("id %q is not GO-YYYY-NNNN", e.ID)
	}
	for _, a := range e.Affected {
		if a.Package.Name == "" {
			return entry{}, nil, fmt.Errorf("%s: an affected package without a module path", e.ID)
		}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return entry{}, nil, err
	}
	stamp := func(key string, t *time.Time) error {
		if !t.IsZero() {
			return nil
		}
		*t = at
		v, err := json.Marshal(at)
		fields[key] = v
		return err
	}
	if err := stamp("modified", &e.Modified); err != nil {
		return entry{}, nil, err
	}
	if err := stamp("published", &e.Published); err != nil {
		return entry{}, nil, err
	}
	raw, err := json.Marshal(fields)
	return e, raw, err
}

// nonSupersededFix is the index's "fixed": the latest fixed version of the SEMVER
// ranges, or none when the vulnerability was introduced again after it. govulncheck
// skips a record whose fixed version the module is at or past, so this is the same
// rule as its own index builder (x/vuln internal/semver.NonSupersededFix).
func nonSupersededFix(ranges []osvRange) string {
	var latest string
	less := func(a, b string) bool { return semver.Compare(canon(a), canon(b)) < 0 }
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, e := range r.Events {
			if e.Fixed != "" && less(latest, e.Fixed) {
				latest = e.Fixed
			}
		}
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && less(latest, e.Introduced) {
				latest = ""
				break
			}
		}
	}
	return latest
}

// canon turns an OSV version (no leading v) into Go's semver form; "" stays "",
// which sorts before every version, as in govulncheck.
func canon(v string) string {
	if v == "" || strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
