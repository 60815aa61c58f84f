// Package memlimit keeps the Go heap under a container's memory limit: it reads the
// cgroup v2 limit and sets the runtime's soft memory limit below it.
package memlimit

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// CgroupMemoryMax is where cgroup v2 states the container's memory limit.
const CgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// Limit is the soft limit the collector should keep the heap under: 90% of the
// container's memory limit (read from file, cgroup v2), so it collects harder before
// the kernel kills the process, instead of letting the heap reach twice what is live
// (GOGC=100). 0 when GOMEMLIMIT is set (the runtime already honours it) or there is
// no limit to read.
func Limit(file string, getenv func(string) (string, bool)) int64 {
	if _, set := getenv("GOMEMLIMIT"); set {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max": no limit
	if err != nil || n <= 0 {
		return 0
	}
	return n / 10 * 9
}

// Apply sets the runtime's memory limit to Limit of the container's cgroup and
// returns it (0: left as it was).
func Apply(getenv func(string) (string, bool)) int64 {
	n := Limit(CgroupMemoryMax, getenv)
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return n
}
