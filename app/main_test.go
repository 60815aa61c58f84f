package app

import (
	"os"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
)

// agentParallel is how many of this package's t.Parallel tests run at once unless
// -parallel is given. The tests that call t.Parallel are the ones that mostly wait on
// processes of their own (node agents, Codex, Claude Code, Chromium, python3), each
// with its own fakes, temp dirs and ports; go test's default (GOMAXPROCS, 2 on CI)
// would let only two of them wait at a time, and this package is the longest of
// `make test`. Tests that set the environment, share the test Redis or assert tight
// timings stay serial.
const agentParallel = 4

func TestMain(m *testing.M) {
	testkit.DefaultParallel(agentParallel)
	os.Exit(m.Run())
}
