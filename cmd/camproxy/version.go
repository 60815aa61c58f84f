package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionString() string {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return fmt.Sprintf("camproxy %s (commit %s, %s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
