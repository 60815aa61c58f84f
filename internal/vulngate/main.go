// Command vulngate reads govulncheck's JSON stream (`govulncheck -format json`) and
// decides what fails the build, so that a finding in the Go standard library and
// one in a module can be told apart:
//
//	govulncheck -format json ./... | go run ./internal/vulngate [-stdlib fail|report]
//
// A vulnerable function the code reaches in a module fails (exit 3, govulncheck's own
// code for it). One in the standard library fails too unless -stdlib=report: the fix
// is a newer Go toolchain, which a developer's machine may not be able to get, while
// the release workflow builds with the newest patch release and keeps the default.
// Findings at package or module level (imported or required, never called) are
// listed and never fail. The summary names each finding's ID, where it is, the
// version that fixes it and the shortest call path to it.
package main

import (
	"fmt"
	"os"
)

func main() {
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(1)
	}
	os.Exit(code)
}
