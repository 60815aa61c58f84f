package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
)

// TestReloadOnFileChangeAndSIGHUP: the real binary picks up an edited config file by
// itself, and on SIGHUP refuses an invalid one with a log line and keeps serving.
func TestReloadOnFileChangeAndSIGHUP(t *testing.T) {
	up := testkit.NewUpstream()
	defer up.Close()
	listen, adminAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	conf := func(arm string) string {
		return fmt.Sprintf("server: {listen: %q, admin_listen: %q}\nupstreams: {openai: {base_url: %q}}\n"+
			"replay: {sinks: [\"file://%s/replay\"], spool_dir: \"%s/spool\"}\n"+
			"experiment: {arms: [{name: %s, weight: 1, augmenter: none}]}\n", listen, adminAddr, up.URL, dir, dir, arm)
	}
	path := dir + "/camproxy.yaml"
	if err := os.WriteFile(path, []byte(conf("first")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CAMPROXY_BE_MAIN=1", "CAMPROXY_ARGS=serve --log-format text --config "+path)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var mu sync.Mutex
	var logs strings.Builder
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "camproxy serving") {
				close(serving)
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(testkit.Patience(t)):
		t.Fatal("camproxy did not start")
	}
	arm := func() string {
		resp, err := http.Post("http://"+listen+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"task %d"}]}`, time.Now().UnixNano())))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Cam-Arm")
	}
	if got := arm(); got != "first" {
		t.Fatalf("arm %q", got)
	}
	if err := os.WriteFile(path, []byte(conf("second")), 0o600); err != nil {
		t.Fatal(err)
	}
	wait(t, "an edited config file reloaded", func() bool { return arm() == "second" })
	if err := os.WriteFile(path, []byte("experiment: {arms: [{name: x, weight: -1, augmenter: nope}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	if !testkit.Poll(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "config reload refused")
	}) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no refusal logged:\n%s", logs.String())
	}
	if got := arm(); got != "second" {
		t.Fatalf("after a refused reload the arm is %q, want the old config's second", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "experiment.arms[0].augmenter") {
		t.Fatalf("the refusal does not name the bad key:\n%s", logs.String())
	}
}
