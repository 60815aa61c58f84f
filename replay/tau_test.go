package replay_test

import (
	"io"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
)

// The stream tests read the real tau-bench runs as events, which package lake makes
// from the file; lake imports replay, so the internal tests get its importer here.
func init() {
	replay.TauBenchImport = func(r io.Reader, emit func([]byte) error) error {
		_, err := lake.ImportTauBench(r, lake.ImportOptions{Domain: "airline"}, emit)
		return err
	}
}
