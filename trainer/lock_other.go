//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package trainer

import "os"

// lockFile is a no-op where flock(2) is not available: do not run two reflections
// on one output there.
func lockFile(*os.File) error { return nil }
