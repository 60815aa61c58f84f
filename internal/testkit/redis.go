package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// RedisServer is a redis-server process of its own on a free loopback port, which a
// test (or the soak run) may kill and restart: the shared one on 6379 must not be.
type RedisServer struct {
	Addr string
	// Persist: an append-only file fsynced on every write, so that data survives a
	// kill (a replay sink on Redis needs it; a cache does not).
	Persist bool
	dir     string
	port    int
	cmd     *exec.Cmd
}

// ErrNoRedisServer: redis-server is not installed.
var ErrNoRedisServer = errors.New("redis-server is not installed")

// NewRedisServer starts redis-server without persistence, its files in dir.
func NewRedisServer(dir string) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNoRedisServer
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, port: port}
	return r, r.Run()
}

// StartRedis is NewRedisServer for a test: it skips when redis-server is not
// installed (unless CAMPROXY_REQUIRE_REDIS=1) and kills the server at cleanup.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	r, err := NewRedisServer(t.TempDir())
	if errors.Is(err, ErrNoRedisServer) && os.Getenv("CAMPROXY_REQUIRE_REDIS") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return r
}

// URL is the redis:// URL of the server.
func (r *RedisServer) URL() string { return "redis://" + r.Addr + "/0" }

// Start is Run for tests that expect it to work.
func (r *RedisServer) Start() {
	if err := r.Run(); err != nil {
		panic(err)
	}
}

// Run starts the server (again) and waits until it accepts connections.
func (r *RedisServer) Run() error {
	aof := []string{"--appendonly", "no"}
	if r.Persist {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	r.cmd = exec.Command("redis-server", append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--protected-mode", "no", "--dir", r.dir}, aof...)...)
	if err := r.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", r.Addr); err == nil {
			c.Close()
			return nil
		}
	}
	r.Kill()
	return fmt.Errorf("redis-server on %s did not start", r.Addr)
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
