package episode

import (
	"os"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
)

// cluster is one real Redis Cluster (3 masters, 3 replicas) for this package's
// tests: the store contract runs on it too (stores), so a claim over several tips
// in different slots would fail with CROSSSLOT.
var cluster testkit.SharedCluster

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }

// TestTipKeysOneSlot: every tip key is in one slot (the claim script reads several),
// and without the hash tag they would not be.
func TestTipKeysOneSlot(t *testing.T) {
	slot := testkit.Slot(tipQueueKey(1))
	spread := map[int]bool{}
	for h := range uint64(64) {
		if testkit.Slot(tipQueueKey(h)) != slot || testkit.Slot(tipLastKey(h)) != slot {
			t.Fatalf("tip %d outside the tips' slot", h)
		}
		spread[testkit.Slot(tipQueueKey(h)[len("{camproxy:tip}"):])] = true
	}
	if len(spread) < 2 {
		t.Fatal("the test's untagged keys share a slot: it could not catch a missing tag")
	}
}
