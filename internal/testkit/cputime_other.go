//go:build !unix

package testkit

import "time"

func processCPU() time.Duration { return cpuUnknown }
