package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// RedisServer is a redis-server process of the test's own on a free loopback port,
// which the test may kill and restart: the shared one on 6379 must not be.
type RedisServer struct {
	Addr string
	t    testing.TB
	port int
	cmd  *exec.Cmd
}

// StartRedis starts redis-server (no persistence) or skips the test when it is not
// installed and CAMPROXY_REQUIRE_REDIS is not 1.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), t: t, port: port}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// URL is the redis:// URL of the server.
func (r *RedisServer) URL() string { return "redis://" + r.Addr + "/0" }

// Start starts the server (again) and waits until it accepts connections.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--dir", r.t.TempDir())
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", r.Addr); err == nil {
			c.Close()
			return
		}
	}
	r.t.Fatal(fmt.Sprintf("redis-server on %s did not start", r.Addr))
}

// Kill stops the server with SIGKILL, as a crash would.
func (r *RedisServer) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}
