//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuUnknown
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
