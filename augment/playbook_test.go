package augment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile swaps content in atomically, as careful writers do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestPlaybookGolden(t *testing.T) {
	tests := []struct {
		file   string
		topN   int
		golden string
	}{
		{"playbook_ace.txt", 0, "playbook_ace.golden"},
		{"playbook_ace.txt", 3, "playbook_ace_top3.golden"},
		{"playbook_ace.txt", 100, "playbook_ace.golden"},
		{"playbook_nocounters.txt", 0, "playbook_nocounters.golden"},
		{"playbook_rcl.json", 0, "playbook_rcl.golden"},
		{"playbook_rcl.json", 2, "playbook_rcl_top2.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			p, err := NewPlaybook(PlaybookOptions{Name: "ace", File: filepath.Join("testdata", tt.file), TopN: tt.topN})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			want := strings.TrimSuffix(readFile(t, filepath.Join("testdata", tt.golden)), "\n")
			for _, task := range []string{"book a flight", "cancel reservation ABC123", ""} {
				got, err := p.Augment(context.Background(), Request{Task: task})
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("Augment(%q) =\n%s\n--- want\n%s", task, got, want)
				}
			}
			sum := sha256.Sum256([]byte(want))
			if v := p.Version(); v != hex.EncodeToString(sum[:6]) {
				t.Errorf("Version() = %q, want the hash of the rendered playbook", v)
			}
		})
	}
}

// The augmenter reads playbooks through package playbook: the parsing is tested
// there; here, what reaches the agent and what fails a start.

// RCL's counters rank top_n: the old reader took "helpful"/"harmful", which RCL never
// writes, and ranked every real RCL playbook as all zeros (file order).
func TestPlaybookTopNUsesRCLCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rcl.json")
	writeFile(t, path, `{"entries": [
	  {"content": "first in the file, never helped", "section": "s", "entry_id": "a", "helpful_count": 0, "harmful_count": 4},
	  {"content": "helped most", "section": "s", "entry_id": "b", "helpful_count": 9, "harmful_count": 0}],
	  "version": "1.0"}`)
	p, err := NewPlaybook(PlaybookOptions{Name: "rcl", File: path, TopN: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, _ := p.Augment(context.Background(), Request{}); got != "## s\n- helped most" {
		t.Errorf("top 1 = %q", got)
	}
}

func TestPlaybookParseErrorsNamed(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"text before any bullet", "## A\nsome prose\n[a] :: x\n", "line 2: expected"},
		{"bad counter", "## A\n[a] helpful=1 harmful=0 :: x\n[b] helpful=lots :: y\n", `line 3: helpful="lots" is not a whole number`},
		{"not a counter", "## A\n\n[a] very helpful :: x\n", `line 3: "very" before "::"`},
		{"json syntax", "{\n  \"version\": 1,\n  \"entries\": [\n    {\"content\": \"x\",}\n  ]\n}\n", "line 4: invalid JSON"},
		{"json type", "{\"entries\": [\n{\"content\": \"x\", \"helpful_count\": \"3\"}]}", "entries[0]: helpful_count: must be a number"},
		{"json no entries", `{"version": 1, "bullets": []}`, `needs "entries"`},
		{"json trailing", `{"entries": []} {}`, "data after the JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pb")
			writeFile(t, path, tt.doc)
			_, err := NewPlaybook(PlaybookOptions{Name: "ace", File: path})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewPlaybook error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	// Tolerated: a dashed line whose brackets and "::" are content, unknown counters,
	// a title, CRLF line ends.
	path := filepath.Join(t.TempDir(), "pb")
	writeFile(t, path, "# Title\r\n## A\r\n- [note] write a::b\r\n[x] helpful=2 neutral=5 :: y\r\n")
	p, err := NewPlaybook(PlaybookOptions{Name: "ace", File: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Text(); got != "## A\n- [note] write a::b\n- y" {
		t.Errorf("rendered %q", got)
	}
}

func TestPlaybookEmpty(t *testing.T) {
	for name, doc := range map[string]string{"text": "# nothing yet\n\n## STRATEGIES\n", "json": `{"version": 0, "entries": []}`, "file": ""} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "playbook")
			writeFile(t, path, doc)
			p, err := NewPlaybook(PlaybookOptions{Name: "ace", File: path})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Augment(context.Background(), Request{Task: "x"}); !errors.Is(err, ErrEmpty) {
				t.Errorf("Augment error = %v, want ErrEmpty", err)
			}
		})
	}
}

func TestNewPlaybookErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.txt")
	if _, err := NewPlaybook(PlaybookOptions{Name: "ace", File: missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: error = %v, want it to name the file", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	writeFile(t, bad, "## A\nprose\n")
	if _, err := NewPlaybook(PlaybookOptions{Name: "ace", File: bad}); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: error = %v, want it to name line 2", err)
	}
	if _, err := NewPlaybook(PlaybookOptions{Name: "ace"}); err == nil {
		t.Error("no file: no error")
	}
}

func TestPlaybookReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "playbook.txt")
	writeFile(t, path, "## A\n[a-1] helpful=1 harmful=0 :: first\n")
	p, err := NewPlaybook(PlaybookOptions{Name: "ace", File: path, CheckEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	serving := func() string {
		s, err := p.Augment(ctx, Request{Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := serving(); got != "## A\n- first" {
		t.Fatalf("serving %q", got)
	}
	v1 := p.Version()

	// An in-place rewrite, then an atomic replace in the other format.
	writeFile(t, path, "## A\n[a-1] helpful=1 harmful=0 :: first\n[a-2] :: second\n")
	testkit.Eventually(t, "the rewritten playbook is not served", func() bool { return serving() == "## A\n- first\n- second" })
	v2 := p.Version()
	if v2 == v1 {
		t.Errorf("Version did not change with the playbook: %s", v2)
	}
	replaceFile(t, path, `{"version": 2, "entries": [{"section": "B", "content": "third"}]}`)
	testkit.Eventually(t, "the replaced playbook is not served", func() bool { return serving() == "## B\n- third" })

	// A broken file keeps the loaded playbook, at every poll and on an explicit Reload.
	writeFile(t, path, `{"version": 3, "entries": [`)
	if err := p.Reload(ctx); err == nil {
		t.Fatal("Reload of a broken file: no error")
	}
	for range 5 {
		time.Sleep(15 * time.Millisecond)
		if got := serving(); got != "## B\n- third" {
			t.Fatalf("after a broken rewrite, serving %q", got)
		}
	}
	// Removing the file keeps it too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if got := serving(); got != "## B\n- third" {
		t.Fatalf("after the file was removed, serving %q", got)
	}
	// And a fixed file is picked up again.
	writeFile(t, path, "## C\n- fourth\n")
	testkit.Eventually(t, "the fixed playbook is not served", func() bool { return serving() == "## C\n- fourth" })
}
