package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryMax is where cgroup v2 states the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// memoryLimit is the soft limit the collector should keep the heap under: 90% of the
// container's memory limit (read from file, cgroup v2), so it collects harder before
// the kernel kills the process, instead of letting the heap reach twice what is live
// (GOGC=100). 0 when GOMEMLIMIT is set (the runtime already honours it) or there is
// no limit to read.
func memoryLimit(file string, getenv func(string) (string, bool)) int64 {
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

// setMemoryLimit applies memoryLimit and returns it (0: left as it was).
func setMemoryLimit(getenv func(string) (string, bool)) int64 {
	n := memoryLimit(cgroupMemoryMax, getenv)
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return n
}
