package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutDir: an output file whose directory does not exist is a problem found
// before the work; stdout, no flag and an existing directory are none.
func TestOutDir(t *testing.T) {
	dir := t.TempDir()
	var p Problems
	for _, out := range []string{"", "-", filepath.Join(dir, "r.html"), filepath.Join(dir, "no", "r.html")} {
		p.OutDir("--out", out)
	}
	want := "--out " + dir + "/no/r.html: directory " + dir + "/no does not exist"
	if len(p) != 1 || p[0] != want {
		t.Errorf("problems %q, want [%q]", p, want)
	}
}

// TestToTerminal: a file or a buffer is not a terminal.
func TestToTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ToTerminal(f) || ToTerminal(&strings.Builder{}) {
		t.Error("a file or a buffer counted as a terminal")
	}
}
