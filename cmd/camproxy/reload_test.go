package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
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
	dir := t.TempDir()
	conf := func(arm string) string {
		return fmt.Sprintf("server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\nupstreams: {openai: {base_url: %q}}\n"+
			"replay: {sinks: [\"file://%s/replay\"], spool_dir: \"%s/spool\"}\n"+
			"experiment: {arms: [{name: %s, weight: 1, augmenter: none}]}\n", up.URL, dir, dir, arm)
	}
	path := dir + "/camproxy.yaml"
	if err := os.WriteFile(path, []byte(conf("first")), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, path)
	listen := p.data
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
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	if !testkit.Poll(t, func() bool { return strings.Contains(p.Logs(), "config reload refused") }) {
		t.Fatalf("no refusal logged:\n%s", p.Logs())
	}
	if got := arm(); got != "second" {
		t.Fatalf("after a refused reload the arm is %q, want the old config's second", got)
	}
	if !strings.Contains(p.Logs(), "experiment.arms[0].augmenter") {
		t.Fatalf("the refusal does not name the bad key:\n%s", p.Logs())
	}
}
