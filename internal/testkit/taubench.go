package testkit

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// tauBench is the import TauBenchLines shares within a test binary.
var tauBench struct {
	once         sync.Once
	lines        [][]byte
	missing, err error
}

// TauBenchLines is the real tau-bench airline runs (shared/data/tau-bench beside the
// repository; shared/data/README.md says where they come from) as the replay event
// lines convert makes of them, or skips t when the file is not there. The import is
// done once per test binary (a second of CPU under -race): the lines are shared,
// read-only; the slice holding them is the caller's.
func TauBenchLines(t testing.TB, convert func(r io.Reader, emit func(line []byte) error) error) [][]byte {
	t.Helper()
	tauBench.once.Do(func() {
		f, err := os.Open(TauBenchAirline())
		if err != nil {
			tauBench.missing = err
			return
		}
		defer f.Close()
		tauBench.err = convert(f, func(l []byte) error {
			tauBench.lines = append(tauBench.lines, bytes.Clone(l))
			return nil
		})
	})
	if tauBench.missing != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", tauBench.missing)
	}
	if tauBench.err != nil {
		t.Fatal(tauBench.err)
	}
	return slices.Clone(tauBench.lines)
}

// TauBenchAirline is the path of the real tau-bench airline file: shared/data beside
// the repository that holds the working directory.
func TauBenchAirline() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir = d
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return filepath.Join(dir, "..", "shared", "data", "tau-bench", "gpt-4o-airline.json")
}
