// Package deploy holds no code: its tests check that the release workflow, the
// Makefile's test target and the Dockerfile build with one script, that the script
// makes what a release publishes (reproducibly, each archive with its SBOM), that the
// workflow signs and attests it after building it and the docs verify what it signs,
// and that the vulnerability scan fails on a reachable vulnerable call.
package deploy

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

type workflow struct {
	On struct {
		Push struct {
			Tags []string `json:"tags"`
		} `json:"push"`
	} `json:"on"`
	Permissions map[string]string `json:"permissions"`
	Jobs        map[string]job    `json:"jobs"`
	Name        string            `json:"name"`
}

type job struct {
	RunsOn      string            `json:"runs-on"`
	Needs       any               `json:"needs"`
	Permissions map[string]string `json:"permissions"`
	Outputs     map[string]string `json:"outputs"`
	Uses        string            `json:"uses"` // a reusable workflow
	With        map[string]any    `json:"with"`
	Steps       []step            `json:"steps"`
}

type step struct {
	ID   string            `json:"id"`
	Name string            `json:"name"`
	Uses string            `json:"uses"`
	Run  string            `json:"run"`
	With map[string]any    `json:"with"`
	Env  map[string]string `json:"env"`
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReleaseWorkflow: a tag builds the binaries with the script `make test` runs,
// and the linux/amd64 and linux/arm64 image from the Dockerfile, which builds its
// binary with the same script.
func TestReleaseWorkflow(t *testing.T) {
	var wf workflow
	if err := yaml.UnmarshalStrict([]byte(read(t, ".github/workflows/release.yml")), &wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	if !slices.Contains(wf.On.Push.Tags, "v*") {
		t.Errorf("release.yml runs on tags %v, want v*", wf.On.Push.Tags)
	}
	var built, pushed bool
	for name, job := range wf.Jobs {
		for _, s := range job.Steps {
			if strings.Contains(s.Run, "make release-build") {
				built = true
			}
			if strings.HasPrefix(s.Uses, "docker/build-push-action@") {
				pushed = true
				platforms := strings.Split(s.With["platforms"].(string), ",")
				if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) || s.With["file"] != "Dockerfile" || s.With["push"] != true {
					t.Errorf("job %s builds %v from %v (push %v): want linux/amd64,linux/arm64 from the Dockerfile", name, platforms, s.With["file"], s.With["push"])
				}
			}
		}
	}
	if !built || !pushed {
		t.Errorf("release.yml: binaries built by make release-build %v, image pushed %v", built, pushed)
	}
	mk := read(t, "Makefile")
	if !regexp.MustCompile(`(?m)^release-build:\n\t.*\./scripts/release-build\.sh`).MatchString(mk) {
		t.Error("make release-build does not run scripts/release-build.sh")
	}
	if !strings.Contains(read(t, "Dockerfile"), "./scripts/release-build.sh") {
		t.Error("the Dockerfile builds the image's binary otherwise than the release's script")
	}
}

// TestReleaseBuild runs the script for this machine's platform, as a release does,
// twice (scripts/reproduce.sh: two copies of the tree at two paths, this machine's
// warm build cache) and wants the same bytes; then runs what it built, and checks the
// archive's entries and that the SBOM lists the binary's own modules.
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles camproxy")
	}
	t.Parallel() // beside TestVulncheck: both wait on processes of their own
	out := t.TempDir()
	target := runtime.GOOS + "/" + runtime.GOARCH
	const epoch = 1767225600 // SOURCE_DATE_EPOCH: every time in the archive
	cmd := exec.Command("./scripts/reproduce.sh", "-o", out, target)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=v9.8.7-test", "COMMIT=0123abc", "SOURCE_DATE_EPOCH=1767225600", "REPRODUCE_CACHE=shared")
	b, err := cmd.CombinedOutput()
	t.Logf("reproduce.sh %s:\n%s", target, b)
	if err != nil {
		t.Fatalf("reproduce.sh %s: %v: two builds of the same tree differ, or one failed", target, err)
	}
	name := "camproxy_9.8.7-test_" + runtime.GOOS + "_" + runtime.GOARCH
	archive, sbom := name+".tar.gz", name+".cdx.json"
	if runtime.GOOS == "windows" {
		t.Skip("the archive is a zip")
	}
	// SHA256SUMS lists the archive and its SBOM, which the release signs.
	var want string
	for _, f := range []string{archive, sbom} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want += hex.EncodeToString(sum[:]) + "  " + f + "\n"
	}
	if sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS")); string(sums) != want {
		t.Errorf("SHA256SUMS %q does not match %s and %s", sums, archive, sbom)
	}
	// The archive holds the binary under NAME/, as the one that was run; entries sorted,
	// owned by 0, stamped with SOURCE_DATE_EPOCH.
	f, _ := os.Open(filepath.Join(out, archive))
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for tr := tar.NewReader(zr); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(time.Unix(epoch, 0)) {
			t.Errorf("%s: %s owned by %d:%d %q, modified %v: want 0:0 at SOURCE_DATE_EPOCH", archive, h.Name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
	}
	if !slices.Contains(files, name+"/camproxy") || !slices.IsSorted(files) {
		t.Errorf("%s holds %v: want NAME/camproxy, names sorted", archive, files)
	}
	bin := filepath.Join(out, name, "camproxy")
	v, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "v9.8.7-test") || !strings.Contains(string(v), "0123abc") {
		t.Errorf("camproxy --version: %q %v: not stamped with VERSION and COMMIT", v, err)
	}
	checkSBOM(t, filepath.Join(out, sbom), bin)
}

// checkSBOM: the SBOM names the binary's main module at the release's version and
// lists the same modules, at the same versions, as `go version -m` reads from the
// binary, plus the standard library at the binary's Go version.
func checkSBOM(t *testing.T, path, bin string) {
	t.Helper()
	var bom struct {
		BOMFormat    string `json:"bomFormat"`
		SerialNumber string `json:"serialNumber"`
		Metadata     struct {
			Timestamp string `json:"timestamp"`
			Component struct{ Name, Version string }
		}
		Components []struct {
			Name, Version, Purl string
			Hashes              []struct{ Alg, Content string }
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SerialNumber != "" || bom.Metadata.Timestamp != "" {
		t.Errorf("SBOM: format %q, serial %q, timestamp %q: want CycloneDX with neither", bom.BOMFormat, bom.SerialNumber, bom.Metadata.Timestamp)
	}
	if c := bom.Metadata.Component; c.Name != "github.com/camproxy/camproxy" || c.Version != "v9.8.7-test" {
		t.Errorf("SBOM describes %s %s", c.Name, c.Version)
	}
	vm, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var mods []string
	var goVersion string
	for i, line := range strings.Split(string(vm), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2:
			goVersion = f[1]
		case len(f) >= 3 && f[0] == "dep":
			mods = append(mods, f[1]+"@"+f[2])
		case len(f) >= 3 && f[0] == "=>": // a replaced module: the SBOM names the replacement
			mods[len(mods)-1] = f[1] + "@" + f[2]
		}
	}
	var listed []string
	var std string
	for _, c := range bom.Components {
		if c.Name == "std" {
			std = c.Version
			continue
		}
		listed = append(listed, c.Name+"@"+c.Version)
		if len(c.Hashes) == 0 {
			t.Errorf("SBOM: %s has no hash", c.Name)
		}
	}
	slices.Sort(mods)
	slices.Sort(listed)
	if len(mods) < 20 || !slices.Equal(mods, listed) {
		t.Errorf("SBOM lists %d modules, go version -m %d:\nonly in the SBOM: %v\nonly in the binary: %v", len(listed), len(mods), minus(listed, mods), minus(mods, listed))
	}
	if std == "" || std != goVersion {
		t.Errorf("SBOM's standard library %q, the binary's Go %q", std, goVersion)
	}
}

func minus(a, b []string) []string {
	var d []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			d = append(d, x)
		}
	}
	return d
}
