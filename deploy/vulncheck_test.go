package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// vulncheck runs scripts/vulncheck.sh, `make check`'s vulnerability step, with args
// and the standard library's findings failing or reported (stdlib); it returns the
// output and the exit code.
func vulncheck(t *testing.T, stdlib string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("./scripts/vulncheck.sh", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VULNCHECK_STDLIB="+stdlib)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(b), 0
	case errors.As(err, &exit):
		return string(b), exit.ExitCode()
	}
	t.Fatalf("vulncheck.sh %v: %v\n%s", args, err, b)
	return "", 0
}

// part is the text of the gate's part that starts with the line holding head, up to
// the next "vulncheck:" line.
func part(out, head string) string {
	i := strings.Index(out, head)
	if i < 0 {
		return ""
	}
	rest := out[i:]
	if j := strings.Index(rest[1:], "\nvulncheck:"); j >= 0 {
		return rest[:j+1]
	}
	return rest
}

// TestVulncheck: the scan `make check` runs, on the database built from the pinned
// golang.org/x/vulndb, offline. A module that calls a vulnerable function
// (golang.org/x/text v0.3.7's language.ParseAcceptLanguage, GO-2022-1059) fails with
// exit 3 and the ID, the path to the call; one that imports the package and calls
// nothing vulnerable passes, the ID listed as informational. Then camproxy itself,
// as it ships: the built binary (govulncheck's binary mode: the symbols the linker
// kept; make check scans the source, whose call graph takes minutes to build), its
// modules failing and the standard library reported (this machine's Go is what it is;
// the release workflow fails on those too, on the newest patch release).
func TestVulncheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the vulnerability database and runs govulncheck")
	}
	// Beside TestReleaseBuild, and the three scans beside each other: each is a
	// process of its own (govulncheck's call graph of a module, seconds of one core),
	// and one after the other they were the package's second-longest wait.
	t.Parallel()
	// The database first, as scripts/vulncheck.sh builds it (once per pinned version,
	// into bin/vulndb): three scans starting on a fresh clone would each build it.
	db := exec.Command("go", "run", "./internal/vulndb", "-pin", "scripts/vulndb.pin", "-cache", "bin/vulndb")
	db.Dir = ".."
	if b, err := db.CombinedOutput(); err != nil {
		t.Fatalf("building the vulnerability database: %v\n%s", err, b)
	}
	const fixture = "deploy/testdata/vulnfixture"
	t.Run("reached", func(t *testing.T) {
		t.Parallel()
		out, code := vulncheck(t, "report", "-C", fixture, "./reached")
		failing := part(out, "vulncheck: FAIL")
		if code != 3 || !strings.Contains(failing, "GO-2022-1059  golang.org/x/text@v0.3.7 (fixed in v0.3.8)") ||
			!strings.Contains(failing, "reached.main → golang.org/x/text/language.ParseAcceptLanguage") {
			t.Errorf("a reachable vulnerable call: exit %d, want 3 and GO-2022-1059 failing with its path:\n%s", code, out)
		}
	})
	t.Run("unreached", func(t *testing.T) {
		t.Parallel()
		out, code := vulncheck(t, "fail", "-C", fixture, "./unreached")
		if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(part(out, "(informational)"), "GO-2022-1059") {
			t.Errorf("a vulnerable package imported, never called: exit %d, want 0 and GO-2022-1059 informational only:\n%s", code, out)
		}
	})
	t.Run("camproxy", func(t *testing.T) {
		t.Parallel()
		bin := os.Getenv("CAMPROXY_BIN") // make test's bin/camproxy
		if bin == "" {
			bin = filepath.Join(t.TempDir(), "camproxy")
			build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/camproxy")
			build.Dir = ".."
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
		}
		out, code := vulncheck(t, "report", "-mode", "binary", bin)
		if code != 0 {
			ids := regexp.MustCompile(`GO-\d{4}-\d+`).FindAllString(part(out, "vulncheck: FAIL"), -1)
			slices.Sort(ids)
			ids = slices.Compact(ids)
			t.Errorf("camproxy has reachable known vulnerabilities (exit %d): %v; upgrade each module to the version it names as fixed:\n%s", code, ids, out)
		}
		t.Logf("camproxy's scan:\n%s", out)
	})
}
