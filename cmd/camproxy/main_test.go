package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestMain lets the test binary act as camproxy itself, so signal tests exercise the
// real main with its real exit code.
func TestMain(m *testing.M) {
	if os.Getenv("CAMPROXY_BE_MAIN") == "1" {
		os.Args = append([]string{"camproxy"}, strings.Fields(os.Getenv("CAMPROXY_ARGS"))...)
		main()
		return
	}
	quickChildExit()
	testkit.DefaultParallel(cliParallel)
	code := m.Run()
	removeAirline()
	os.Exit(code)
}

// cliParallel is how many of this package's t.Parallel tests run at once unless
// -parallel is given. They run after the serial ones: two (TestQuickstart,
// TestMakeRun) mostly wait on a build and a shell, the rest run CLI commands in
// process on the shared airline import; go test's default (GOMAXPROCS, 2 on CI)
// would leave a core idle while the waiting two hold both slots.
const cliParallel = 3

// quickChildExit stops the children this binary starts (itself as camproxy or as a
// stand-in tool) from idling a second when they exit: a -race binary sleeps
// GORACE's atexit_sleep_ms (1000 by default) before exiting, and the package starts
// dozens of them. Their race reports are written when found, before that sleep,
// and still fail the child with exit code 66. A value the caller set stays.
func quickChildExit() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeConfig writes a config file; a replay block is added, unless given, so that no
// test writes into the source tree.
func writeConfig(t *testing.T, text string) string {
	dir := t.TempDir()
	if !strings.Contains(text, "replay:") {
		text += "replay: {sinks: [\"file://" + dir + "/replay\"], spool_dir: \"" + dir + "/spool\"}\n"
	}
	p := filepath.Join(dir, "camproxy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSIGTERMExitsZero(t *testing.T) {
	cfg := writeConfig(t, "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  shutdown_grace: 5s\n")
	p := startServe(t, cfg)
	if c, err := net.Dial("tcp", p.data); err != nil {
		t.Fatalf("data plane not listening: %v", err)
	} else {
		c.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Logs())
		}
	case <-time.After(testkit.Patience(t)):
		_ = p.cmd.Process.Kill()
		t.Fatal("camproxy did not exit after SIGTERM")
	}
}

func TestExitCodes(t *testing.T) {
	bad := writeConfig(t, "server:\n  listn: \":1\"\nexperiment:\n  arms: [{name: a, weight: 1, augmenter: nope}]\n")
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"no command", nil, nil, 2, []string{"no command"}},
		{"unknown command", []string{"frobnicate"}, nil, 2, []string{`unknown command "frobnicate"`}},
		{"a near miss", []string{"reprot"}, nil, 2, []string{`did you mean "report"?`}},
		{"bad flag", []string{"serve", "--nope"}, nil, 2, []string{"nope"}},
		{"missing file", []string{"serve", "--config", "/nonexistent/camproxy.yaml"}, nil, 2, []string{"/nonexistent/camproxy.yaml"}},
		{"bad config names keys", []string{"serve", "--config", bad}, nil, 2, []string{"server.listn", "experiment.arms[0].augmenter"}},
		{"env config", []string{"serve"}, map[string]string{"CAMPROXY_CONFIG": bad}, 2, []string{"server.listn"}},
		{"version", []string{"version"}, nil, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			getenv := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
			err := run(context.Background(), c.args, &out, &errb, getenv)
			code := cobracli.ExitCode(err, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d (err %v)", code, c.code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Fatalf("stderr does not name %q:\n%s", w, errb.String())
				}
			}
			if c.name == "version" && !strings.HasPrefix(out.String(), "camproxy ") {
				t.Fatalf("version output %q", out.String())
			}
		})
	}
}

func TestServeFailsOnBusyPort(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	cfg := writeConfig(t, "server:\n  listen: \""+l.Addr().String()+"\"\n  admin_listen: \"127.0.0.1:0\"\n")
	var errb bytes.Buffer
	err := run(context.Background(), []string{"serve", "--config", cfg}, &errb, &errb, func(string) (string, bool) { return "", false })
	var ue *cobracli.UsageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "server.listen") {
		t.Fatalf("busy port: %v (want a run-time error naming server.listen)", err)
	}
}
