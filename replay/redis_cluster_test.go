package replay

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
)

// cluster is one real Redis Cluster (3 masters, 3 replicas) for this package's tests.
var cluster testkit.SharedCluster

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }

// TestRedisStreamOnCluster: the replay stream on a Redis Cluster, named by the one
// URL form (seed nodes as addr=): written by two sinks, read back whole, whichever
// node the stream's slot lives on.
func TestRedisStreamOnCluster(t *testing.T) {
	c := cluster.Get(t)
	stream := fmt.Sprintf("camproxy-test:replay:%s", t.Name())
	uri := c.URL() + "&stream=" + stream
	ctx := t.Context()
	var want []string
	for w := range 2 {
		sink, err := OpenSink(ctx, uri, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var lines [][]byte
		for i := range 700 {
			l := fmt.Sprintf(`{"v":1,"writer":%d,"i":%d}`, w, i)
			lines = append(lines, []byte(l))
			want = append(want, l)
		}
		if err := sink.Write(ctx, lines); err != nil {
			t.Fatalf("write on the cluster: %v", err)
		}
		_ = sink.Close()
	}
	src, err := OpenSource(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer src.(io.Closer).Close()
	var got []string
	if err := src.Scan(ctx, func(line []byte) error { got = append(got, string(line)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d lines, wrote %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("line %d = %s, want %s", i, got[i], want[i])
		}
	}
	rdb := c.Client()
	defer rdb.Close()
	rdb.Del(ctx, stream)
}
