package lake

import (
	"testing"

	"github.com/camproxy/camproxy/replay"
)

// TestPartitionSummary: what a partitioned export tells its user about its layout
// and the episodes the read left out.
func TestPartitionSummary(t *testing.T) {
	for _, tc := range []struct {
		by   []string
		sum  replay.Summary
		want string
	}{
		{nil, replay.Summary{}, "no partition columns"},
		{[]string{"dt", "arm"}, replay.Summary{}, "by dt, arm"},
		{[]string{"arm"}, replay.Summary{Unselected: 3, Partial: 1}, "by arm; 3 episodes not selected, 1 cut by the window"},
	} {
		if got := PartitionSummary(tc.by, tc.sum); got != tc.want {
			t.Errorf("PartitionSummary(%q, %+v) = %q, want %q", tc.by, tc.sum, got, tc.want)
		}
	}
	m := &Manifest{Files: []ManifestFile{{Path: "dt=1/arm=a/part-0.parquet"}, {Path: "dt=1/arm=a/part-1.parquet"}, {Path: "dt=1/arm=b/part-0.parquet"}}}
	if n := m.Partitions(); n != 2 {
		t.Errorf("Partitions = %d, want 2", n)
	}
}
