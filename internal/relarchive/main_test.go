package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// tree lays out NAME/{bin, README.md, doc/a} under a new directory with the given
// file modes and times, as two machines' checkouts differ.
func tree(t *testing.T, mode os.FileMode, touched time.Time) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"pkg/bin": "\x7fELF", "pkg/README.md": "read me", "pkg/doc/a": "a"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700|mode&0o070); err != nil {
			t.Fatal(err)
		}
		m := mode &^ 0o111
		if filepath.Base(p) == "bin" {
			m = mode | 0o100
		}
		if err := os.WriteFile(p, []byte(body), m); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, touched, touched); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSameBytes: two trees with the same contents but other permissions, times and
// locations give the same archive, whose entries are sorted, owned by 0 and stamped
// with the given time; the executable stays executable.
func TestSameBytes(t *testing.T) {
	const epoch = 1767225600
	for _, ext := range []string{".tar.gz", ".zip"} {
		a, b := tree(t, 0o600, time.Now()), tree(t, 0o664, time.Unix(42, 0))
		outA, outB := filepath.Join(t.TempDir(), "pkg"+ext), filepath.Join(t.TempDir(), "pkg"+ext)
		for _, c := range [][2]string{{a, outA}, {b, outB}} {
			if err := run([]string{"-mtime", "1767225600", "-o", c[1], "-C", c[0], "pkg"}, io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		ba, _ := os.ReadFile(outA)
		bb, _ := os.ReadFile(outB)
		if len(ba) == 0 || !bytes.Equal(ba, bb) {
			t.Fatalf("%s: two trees with the same files give different archives", ext)
		}
		type entry struct {
			name string
			mode int64
			mt   time.Time
		}
		var got []entry
		if ext == ".tar.gz" {
			zr, err := gzip.NewReader(bytes.NewReader(ba))
			if err != nil {
				t.Fatal(err)
			}
			if zr.Name != "" || !zr.ModTime.IsZero() {
				t.Errorf("gzip header names %q at %v", zr.Name, zr.ModTime)
			}
			tr := tar.NewReader(zr)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
					t.Errorf("%s owned by %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
				}
				got = append(got, entry{h.Name, h.Mode, h.ModTime})
			}
		} else {
			zr, err := zip.NewReader(bytes.NewReader(ba), int64(len(ba)))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range zr.File {
				got = append(got, entry{f.Name, int64(f.Mode().Perm()), f.Modified})
			}
		}
		want := []entry{{"pkg/", 0o755, time.Time{}}, {"pkg/README.md", 0o644, time.Time{}}, {"pkg/bin", 0o755, time.Time{}}, {"pkg/doc/", 0o755, time.Time{}}, {"pkg/doc/a", 0o644, time.Time{}}}
		if len(got) != len(want) {
			t.Fatalf("%s holds %v", ext, got)
		}
		for i := range want {
			if got[i].name != want[i].name || got[i].mode != want[i].mode || !got[i].mt.Equal(time.Unix(epoch, 0)) {
				t.Errorf("%s entry %d = %+v, want %s %o at %d", ext, i, got[i], want[i].name, want[i].mode, epoch)
			}
		}
	}
}
