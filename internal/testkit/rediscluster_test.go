package testkit

import (
	"testing"
)

// TestRedisClusterAndSentinel: the starters give a working cluster (every slot
// served; Slot agrees with the server's CLUSTER KEYSLOT) and a Sentinel setup whose
// master the sentinels name.
func TestRedisClusterAndSentinel(t *testing.T) {
	c := StartRedisCluster(t)
	rdb := c.Client()
	defer rdb.Close()
	ctx := t.Context()
	for _, k := range []string{"a", "camproxy:ctx:{cam:v1:abc}", "{camproxy:tip}:q:1", "x{}y", "{a}{b}", "foo{bar"} {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, server says %d", k, got, want)
		}
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("set %q on the cluster: %v", k, err)
		}
	}
	if _, err := c.MasterOf(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	s := StartRedisSentinel(t)
	m, err := s.CurrentMaster(ctx)
	if err != nil || m != s.Servers[0] {
		t.Fatalf("master %v, %v; want the first server", m, err)
	}
}
