// Package deploy holds no code: its tests check that the release workflow, the
// Makefile's test target and the Dockerfile build with one script, and that the
// script makes what a release publishes.
package deploy

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type workflow struct {
	On struct {
		Push struct {
			Tags []string `json:"tags"`
		} `json:"push"`
	} `json:"on"`
	Permissions map[string]string `json:"permissions"`
	Jobs        map[string]struct {
		RunsOn string `json:"runs-on"`
		Needs  any    `json:"needs"`
		Steps  []step `json:"steps"`
	} `json:"jobs"`
	Name string `json:"name"`
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
// and runs what it built.
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles camproxy")
	}
	out := t.TempDir()
	target := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("./scripts/release-build.sh", "-o", out, target)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=v9.8.7-test", "COMMIT=0123abc")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release-build.sh %s: %v\n%s", target, err, b)
	}
	name := "camproxy_9.8.7-test_" + runtime.GOOS + "_" + runtime.GOARCH
	archive := name + ".tar.gz"
	if runtime.GOOS == "windows" {
		t.Skip("the archive is a zip")
	}
	b, err := os.ReadFile(filepath.Join(out, archive))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS")); string(sums) != hex.EncodeToString(sum[:])+"  "+archive+"\n" {
		t.Errorf("SHA256SUMS %q does not match %s", sums, archive)
	}
	// The archive holds the binary under NAME/, as the one that was run.
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
	}
	if !slices.Contains(files, name+"/camproxy") {
		t.Errorf("%s holds %v", archive, files)
	}
	v, err := exec.Command(filepath.Join(out, name, "camproxy"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "v9.8.7-test") || !strings.Contains(string(v), "0123abc") {
		t.Errorf("camproxy --version: %q %v: not stamped with VERSION and COMMIT", v, err)
	}
}
