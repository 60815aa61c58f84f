package testkit

import (
	"flag"
	"strconv"
)

// DefaultParallel sets go test's -parallel to n unless the command line gave one:
// for a TestMain whose t.Parallel tests mostly wait (on processes, builds, shells),
// where the default (GOMAXPROCS) would leave the cores idle. It parses the flags.
func DefaultParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}
