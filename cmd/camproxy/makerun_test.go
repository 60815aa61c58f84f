package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMakeRun runs the README's first command as a user would: `make run` says it is
// building before the (silent, first-time slow) compile, then starts camproxy serve.
// Ports come from a config with port 0 so that the test does not need 8080 free.
func TestMakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "camproxy.yaml")
	if err := os.WriteFile(cfg, []byte("server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\nreplay:\n  sinks: [\"file://"+dir+"/replay\"]\n  spool_dir: "+dir+"/spool\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "run")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CAMPROXY_CONFIG="+cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stop make and the server together
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	building := false
	for {
		l, ok := <-lines
		if !ok {
			t.Fatalf("make run ended before serving:\n%s", strings.Join(seen, "\n"))
		}
		seen = append(seen, l)
		if strings.Contains(l, "building bin/camproxy") {
			building = true
		}
		if strings.Contains(l, "camproxy serving") {
			if !building {
				t.Fatalf("camproxy served without make run saying it was building first:\n%s", strings.Join(seen, "\n"))
			}
			return
		}
	}
}
