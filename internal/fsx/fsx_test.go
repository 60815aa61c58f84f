package fsx

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFileAtomic: a write that fails leaves neither the file nor a temporary
// beside it (an old file stays as it was); one that succeeds is readable by others.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "episodes.jsonl")
	if err := os.WriteFile(out, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFileAtomic(out, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half a ro")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "old\n" {
		t.Errorf("after a failed write the file holds %q", b)
	}
	if err := WriteFileAtomic(out, func(w io.Writer) error { _, err := io.WriteString(w, "new\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "new\n" {
		t.Errorf("file holds %q, want new", b)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", st.Mode().Perm(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want the file alone", len(ents))
	}
	if err := WriteFileAtomic(filepath.Join(dir, "no", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Error("a missing directory wrote")
	}
}
