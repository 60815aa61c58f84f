package policies

import (
	"os"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
)

// cluster is one real Redis Cluster (3 masters, 3 replicas) for this package's tests.
var cluster testkit.SharedCluster

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }
