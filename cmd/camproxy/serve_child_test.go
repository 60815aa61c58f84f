package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// serveProc is one `camproxy serve` child process (this test binary re-executed as
// main), the addresses it bound and what it logged.
type serveProc struct {
	cmd         *exec.Cmd
	data, admin string
	exited      chan struct{} // closed when the child's stderr ends: it exited

	mu   sync.Mutex
	logs strings.Builder

	waitOnce sync.Once
	waitErr  error
}

// startServe runs `camproxy serve --config cfg` as a child process and returns once
// it logs that it serves, with the addresses it logged; it is killed at cleanup. The
// config should listen on 127.0.0.1:0: a port picked beforehand and freed can be
// taken by another test's connection before the child binds it. A child that exits
// before serving fails the test at once, with its log.
func startServe(t *testing.T, cfg string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: exec.Command(os.Args[0]), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "CAMPROXY_BE_MAIN=1", "CAMPROXY_ARGS=serve --log-format json --config "+cfg)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.Wait()
	})
	up := make(chan [2]string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if l := gjson.Parse(sc.Text()); l.Get("msg").String() == "camproxy serving" {
				up <- [2]string{l.Get("listen").String(), l.Get("admin").String()}
			}
		}
	}()
	select {
	case a := <-up:
		p.data, p.admin = a[0], a[1]
		return p
	case <-p.exited:
		t.Fatalf("camproxy exited before it served:\n%s", p.Logs())
	case <-time.After(testkit.Patience(t)):
		t.Fatalf("camproxy did not start:\n%s", p.Logs())
	}
	return nil
}

// Logs is what the child logged so far.
func (p *serveProc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Wait waits for the child to exit, once its log has been read to the end (a Wait
// before that could cut the last lines off).
func (p *serveProc) Wait() error {
	<-p.exited
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}
