package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickstartBlocks returns the README's ```sh quickstart blocks, in order, joined: the
// commands a reader pastes.
func quickstartBlocks(readme string) string {
	var out []string
	var in bool
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh quickstart":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in:
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// builtBinary puts the camproxy binary at path: the one `make test` built for this run
// ($CAMPROXY_BIN, linked), else one built now.
func builtBinary(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if b := os.Getenv("CAMPROXY_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("CAMPROXY_BIN: %v", err)
		}
		if err := os.Symlink(b, path); err != nil {
			t.Fatal(err)
		}
		return
	}
	build := exec.Command("go", "build", "-o", path, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

func TestQuickstartBlocks(t *testing.T) {
	md := "# x\n```sh\nmake run\n```\n```sh quickstart\na &\nb\n```\ntext\n```sh quickstart\nc\n```\n"
	if got, want := quickstartBlocks(md), "a &\nb\nc"; got != want {
		t.Errorf("quickstartBlocks = %q, want %q", got, want)
	}
}

// TestQuickstart runs the README's quickstart as written, in an empty directory with
// examples/ and the built camproxy on PATH, against `camproxy dev upstream`. The only
// change is the three loopback ports (8000, 8080, 9090), rewritten to free ones so the
// test does not need them free; they are rewritten in the example config too.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	script := quickstartBlocks(string(readme))
	for _, want := range []string{"camproxy dev upstream", "examples/rag-only.yaml", "/v1/chat/completions", "/v1/feedback", "camproxy report"} {
		if !strings.Contains(script, want) {
			t.Fatalf("the README's quickstart blocks (```sh quickstart) do not run %q:\n%s", want, script)
		}
	}

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	builtBinary(t, filepath.Join(bin, "camproxy"))
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(filepath.Join(work, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	ports := strings.NewReplacer("127.0.0.1:8000", freeAddr(t), "127.0.0.1:8080", freeAddr(t), "127.0.0.1:9090", freeAddr(t))
	for _, name := range []string{"rag-only.yaml", "guidance.jsonl"} {
		b, err := os.ReadFile(filepath.Join("../../examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "examples", name), []byte(ports.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A quickstart stuck in its wait loop ends before go test's -timeout does, so that
	// the failure shows what the script printed.
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/10))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", ports.Replace(script))
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Dir = work
	var env []string
	for _, kv := range os.Environ() { // the README's variables are the script's own
		if !strings.HasPrefix(kv, "UPSTREAM_URL=") && !strings.HasPrefix(kv, "CAMPROXY_CONFIG=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a failed run leaves no server behind
	// A file, not a pipe: Wait does not wait for the servers the script started in the
	// background (they hold its stdout) when a failed script leaves them running.
	outFile, err := os.Create(filepath.Join(tmp, "quickstart.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	runErr := cmd.Wait()
	b, _ := os.ReadFile(outFile.Name())
	got := string(b)
	if runErr != nil {
		t.Fatalf("the quickstart failed: %v\n%s", runErr, got)
	}

	arm := regexp.MustCompile(`(?mi)^X-CAM-Arm: (\S+)`).FindStringSubmatch(got)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?mi)^X-CAM-Episode-Id: ep_\w+`),
		regexp.MustCompile(`(?mi)^X-CAM-Arm: (baseline|rag)\s`),
		regexp.MustCompile(`(?mi)^X-CAM-Context: \w+`),
		regexp.MustCompile(`I see \d+ characters of task context\.`), // the dev upstream answered through camproxy
		regexp.MustCompile(`(?m)^HTTP/1\.1 202 Accepted`),            // the reward was taken
		regexp.MustCompile(`"status":"accepted"`),
		regexp.MustCompile(`camproxy report: file://\./camproxy-data/replay, 1 episode`),
	} {
		if !want.MatchString(got) {
			t.Errorf("the quickstart's output has no %s:\n%s", want, got)
		}
	}
	if arm == nil || !regexp.MustCompile(`(?m)^`+arm[1]+`\s+1\s+1\s+1\.000`).MatchString(got) {
		t.Errorf("the report has no row for the arm the call was served on (%v), one episode rewarded 1:\n%s", arm, got)
	}
	if _, err := os.Stat(filepath.Join(work, "camproxy-data", "replay")); err != nil {
		t.Errorf("the data is not where the README says: %v", err)
	}
}
