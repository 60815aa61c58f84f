//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package trainer

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking lock on f; closing f releases it.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
