package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
	"sigs.k8s.io/yaml"
)

const (
	workflowPath = ".github/workflows/release.yml"
	// The issuer of the OIDC tokens GitHub Actions gives a job with id-token: write,
	// which Fulcio writes into a keyless signature's certificate.
	githubIssuer = "https://token.actions.githubusercontent.com"
	slsaGeneric  = "slsa-framework/slsa-github-generator/.github/workflows/generator_generic_slsa3.yml@"
)

// lint runs actionlint (go.mod pins it) over one workflow file, without shellcheck or
// pyflakes so the result does not depend on what the machine has installed.
func lint(t *testing.T, path string) []*actionlint.Error {
	t.Helper()
	l, err := actionlint.NewLinter(os.Stderr, &actionlint.LinterOptions{Color: actionlint.ColorOptionKindNever})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return errs
}

// TestReleaseWorkflowLint: actionlint finds nothing in release.yml, and does find a
// job that needs one that does not exist (the linter is live).
func TestReleaseWorkflowLint(t *testing.T) {
	path := filepath.Join("..", workflowPath)
	for _, e := range lint(t, path) {
		t.Errorf("actionlint: %s:%d:%d: %s [%s]", workflowPath, e.Line, e.Column, e.Message, e.Kind)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "release.yml")
	if err := os.WriteFile(broken, bytes.Replace(b, []byte("needs: [binaries]"), []byte("needs: [no-such-job]"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(lint(t, broken)) == 0 {
		t.Error("actionlint accepts a job that needs a job that does not exist")
	}
}

// needsAll is every job name reaches through needs:, transitively.
func needsAll(wf workflow, name string) []string {
	var all []string
	var walk func(string)
	walk = func(n string) {
		for _, d := range needsOf(wf.Jobs[n]) {
			if !slices.Contains(all, d) {
				all = append(all, d)
				walk(d)
			}
		}
	}
	walk(name)
	return all
}

func needsOf(j job) []string {
	switch n := j.Needs.(type) {
	case string:
		return []string{n}
	case []any:
		var s []string
		for _, x := range n {
			s = append(s, fmt.Sprint(x))
		}
		return s
	}
	return nil
}

// jobWith is the one job with a step for which match is true, and that step's index.
func jobWith(t *testing.T, wf workflow, what string, match func(step) bool) (string, int) {
	t.Helper()
	var found []string
	var at int
	for name, j := range wf.Jobs {
		for i, s := range j.Steps {
			if match(s) {
				found, at = append(found, name), i
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("release.yml: %s in jobs %v, want one step in one job", what, found)
	}
	return found[0], at
}

// mayMintToken: the job can ask for an OIDC token, so a keyless signature names it.
func mayMintToken(wf workflow, j job) bool {
	if j.Permissions != nil {
		return j.Permissions["id-token"] == "write"
	}
	return wf.Permissions["id-token"] == "write"
}

func releaseWorkflow(t *testing.T) workflow {
	t.Helper()
	var wf workflow
	if err := yaml.UnmarshalStrict([]byte(read(t, workflowPath)), &wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	return wf
}

// TestReleaseSignedAfterBuild: SHA256SUMS, the image and the chart are signed with
// cosign keylessly, each by a job that runs after what it signs was built and pushed
// (needs:, or a later step of the same job) and that may mint an OIDC token; the SLSA
// generator attests the files SHA256SUMS lists, after the build and the release.
func TestReleaseSignedAfterBuild(t *testing.T) {
	wf := releaseWorkflow(t)
	build, _ := jobWith(t, wf, "the binaries' build", func(s step) bool { return strings.Contains(s.Run, "make release-build") })

	// SHA256SUMS: signed into a bundle the release publishes.
	sign, at := jobWith(t, wf, "cosign sign-blob", func(s step) bool { return strings.Contains(s.Run, "cosign sign-blob") })
	if !slices.Contains(needsAll(wf, sign), build) {
		t.Errorf("job %s signs SHA256SUMS without needing %s, which builds it", sign, build)
	}
	signStep := wf.Jobs[sign].Steps[at].Run
	if !regexp.MustCompile(`--yes --bundle dist/SHA256SUMS\.sigstore\.json dist/SHA256SUMS$`).MatchString(strings.TrimSpace(signStep)) {
		t.Errorf("sign-blob step %q: want --yes --bundle dist/SHA256SUMS.sigstore.json dist/SHA256SUMS", signStep)
	}
	published := false
	for _, s := range wf.Jobs[sign].Steps[at+1:] {
		published = published || strings.Contains(s.Run, "gh release create") && strings.Contains(s.Run, "dist/SHA256SUMS.sigstore.json")
	}
	if !published {
		t.Errorf("job %s does not publish the bundle after signing", sign)
	}

	// The image: signed by digest after the build pushed it.
	image, at := jobWith(t, wf, "the image's build", func(s step) bool { return strings.HasPrefix(s.Uses, "docker/build-push-action@") })
	push := wf.Jobs[image].Steps[at]
	if push.With["sbom"] != true || push.ID == "" || wf.Jobs[image].Outputs["digest"] != "${{ steps."+push.ID+".outputs.digest }}" {
		t.Errorf("job %s: the build wants sbom: true and its digest as the job's output digest (sbom %v, id %q, outputs %v)", image, push.With["sbom"], push.ID, wf.Jobs[image].Outputs)
	}
	signImage, _ := jobWith(t, wf, "cosign sign of the image", func(s step) bool {
		return strings.Contains(s.Run, "cosign sign --yes") && strings.Contains(s.Run, "ghcr.io/${{ github.repository }}@${{ needs."+image+".outputs.digest }}")
	})
	if !slices.Contains(needsOf(wf.Jobs[signImage]), image) {
		t.Errorf("job %s signs the image without needing %s", signImage, image)
	}

	// The chart: signed by the digest helm push printed, in a later step.
	chart, pushAt := jobWith(t, wf, "helm push", func(s step) bool { return strings.Contains(s.Run, "helm push") })
	signChart := slices.IndexFunc(wf.Jobs[chart].Steps, func(s step) bool {
		return strings.Contains(s.Run, "cosign sign --yes") && strings.Contains(s.Run, "/charts/camproxy@${{ steps."+wf.Jobs[chart].Steps[pushAt].ID+".outputs.digest }}")
	})
	if wf.Jobs[chart].Steps[pushAt].ID == "" || signChart <= pushAt {
		t.Errorf("job %s: no cosign sign of the pushed chart's digest after helm push", chart)
	}

	for _, j := range []string{sign, signImage, chart} {
		if !mayMintToken(wf, wf.Jobs[j]) {
			t.Errorf("job %s signs keylessly without id-token: write", j)
		}
	}

	// Provenance: the standard generic generator, fed SHA256SUMS, after the build and the release.
	var prov []string
	for name, j := range wf.Jobs {
		if strings.HasPrefix(j.Uses, slsaGeneric) {
			prov = append(prov, name)
		}
	}
	if len(prov) != 1 {
		t.Fatalf("release.yml: the SLSA generic generator in jobs %v, want one", prov)
	}
	p := wf.Jobs[prov[0]]
	if ref := strings.TrimPrefix(p.Uses, slsaGeneric); !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(ref) {
		t.Errorf("the generator is called at %q: it must be a release tag (slsa-verifier checks it)", ref)
	}
	if !slices.Contains(needsAll(wf, prov[0]), build) || !slices.Contains(needsAll(wf, prov[0]), sign) {
		t.Errorf("job %s needs %v: want %s (the build) and %s (the release it uploads to)", prov[0], needsOf(p), build, sign)
	}
	if p.With["base64-subjects"] != "${{ needs."+build+".outputs.hashes }}" || p.With["upload-assets"] != true || !mayMintToken(wf, p) || p.Permissions["actions"] != "read" {
		t.Errorf("job %s: with %v, permissions %v", prov[0], p.With, p.Permissions)
	}
	hashes := regexp.MustCompile(`^\$\{\{ steps\.(\S+)\.outputs\.hashes \}\}$`).FindStringSubmatch(wf.Jobs[build].Outputs["hashes"])
	if hashes == nil {
		t.Fatalf("job %s has no hashes output from a step", build)
	}
	subjects := slices.IndexFunc(wf.Jobs[build].Steps, func(s step) bool { return s.ID == hashes[1] })
	if subjects < 0 || !strings.Contains(wf.Jobs[build].Steps[subjects].Run, "base64 -w0 < dist/SHA256SUMS") {
		t.Errorf("job %s: the provenance subjects are not SHA256SUMS, base64", build)
	}
}

// command is one shell command of the docs: its words, and its flags' values.
type command struct {
	words []string
	flags map[string]string
}

// shellCommands splits the docs' ```sh blocks into commands: comments dropped, a
// trailing backslash joins lines, single quotes group a word; $V becomes version.
func shellCommands(md, version string) []command {
	var cmds []command
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(md, -1) {
		text := strings.ReplaceAll(block[1], "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			if i := strings.Index(line, "#"); i >= 0 && !strings.Contains(line[:i], "'") {
				line = line[:i]
			}
			line = strings.NewReplacer("${V}", version, "$V", version).Replace(line)
			var c command
			c.flags = map[string]string{}
			for _, m := range regexp.MustCompile(`'([^']*)'|(\S+)`).FindAllStringSubmatch(line, -1) {
				c.words = append(c.words, m[1]+m[2])
			}
			for i := 0; i < len(c.words)-1; i++ {
				if strings.HasPrefix(c.words[i], "--") {
					c.flags[c.words[i]] = c.words[i+1]
				}
			}
			if len(c.words) > 0 {
				cmds = append(cmds, c)
			}
		}
	}
	return cmds
}

// TestVerifyDocsMatchWorkflow: the commands docs/deployment.md gives to verify a
// download and an image accept what release.yml signs at a tag, and nothing signed
// by another repository, workflow or ref: the identity is this repository's workflow
// file at refs/tags/vVERSION, the issuer GitHub's, the bundle and provenance names the
// workflow's.
func TestVerifyDocsMatchWorkflow(t *testing.T) {
	wf := releaseWorkflow(t)
	// The repository: where the image is pushed, ghcr.io/${{ github.repository }}, is
	// the one the Dockerfile names as the source.
	src := regexp.MustCompile(`org\.opencontainers\.image\.source="https://github\.com/([^"]+)"`).FindStringSubmatch(read(t, "Dockerfile"))
	if src == nil {
		t.Fatal("the Dockerfile names no source repository")
	}
	repo := src[1]
	const version = "1.2.3"
	identity := "https://github.com/" + repo + "/" + workflowPath + "@refs/tags/v" + version
	others := []string{
		"https://github.com/someone/camproxy/" + workflowPath + "@refs/tags/v" + version,
		"https://github.com/" + repo + "/.github/workflows/ci.yml@refs/tags/v" + version,
		"https://github.com/" + repo + "/" + workflowPath + "@refs/heads/main",
	}

	var blob, image, slsa *command
	cmds := shellCommands(read(t, "docs/deployment.md"), version)
	for i, c := range cmds {
		switch {
		case len(c.words) > 1 && c.words[0] == "cosign" && c.words[1] == "verify-blob":
			blob = &cmds[i]
		case len(c.words) > 2 && c.words[0] == "cosign" && c.words[1] == "verify" && strings.HasPrefix(c.words[2], "ghcr.io/"+repo+":"):
			image = &cmds[i]
		case len(c.words) > 1 && c.words[0] == "slsa-verifier" && c.words[1] == "verify-artifact":
			slsa = &cmds[i]
		}
	}
	if blob == nil || image == nil || slsa == nil {
		t.Fatalf("docs/deployment.md: cosign verify-blob %v, cosign verify ghcr.io/%s %v, slsa-verifier verify-artifact %v: want all three", blob != nil, repo, image != nil, slsa != nil)
	}

	if got := blob.flags["--certificate-identity"]; got != identity {
		t.Errorf("cosign verify-blob --certificate-identity %q, want %q", got, identity)
	}
	if re, err := regexp.Compile(image.flags["--certificate-identity-regexp"]); err != nil || !re.MatchString(identity) {
		t.Errorf("cosign verify --certificate-identity-regexp %q (%v) does not accept %q", image.flags["--certificate-identity-regexp"], err, identity)
	} else {
		for _, o := range others {
			if re.MatchString(o) {
				t.Errorf("cosign verify --certificate-identity-regexp %q accepts %q", re, o)
			}
		}
	}
	for _, c := range []*command{blob, image} {
		if got := c.flags["--certificate-oidc-issuer"]; got != githubIssuer {
			t.Errorf("%s --certificate-oidc-issuer %q, want %q", strings.Join(c.words[:2], " "), got, githubIssuer)
		}
	}
	if b := blob.flags["--bundle"]; b != "SHA256SUMS.sigstore.json" || !strings.Contains(read(t, workflowPath), "--bundle dist/"+b) || blob.words[len(blob.words)-1] != "SHA256SUMS" {
		t.Errorf("cosign verify-blob --bundle %q of %q: the workflow signs dist/SHA256SUMS into that bundle", b, blob.words[len(blob.words)-1])
	}
	// The image the workflow pushes and signs is ghcr.io/<repository>.
	if !strings.Contains(read(t, workflowPath), "images: ghcr.io/${{ github.repository }}") {
		t.Error("release.yml pushes the image elsewhere than ghcr.io/${{ github.repository }}")
	}

	for _, j := range wf.Jobs {
		if strings.HasPrefix(j.Uses, slsaGeneric) {
			if got := slsa.flags["--provenance-path"]; got != j.With["provenance-name"] {
				t.Errorf("slsa-verifier --provenance-path %q, the workflow uploads %v", got, j.With["provenance-name"])
			}
		}
	}
	if got := slsa.flags["--source-uri"]; got != "github.com/"+repo {
		t.Errorf("slsa-verifier --source-uri %q, want github.com/%s", got, repo)
	}
	if got := slsa.flags["--source-tag"]; got != "v"+version {
		t.Errorf("slsa-verifier --source-tag %q, want v%s", got, version)
	}
}
