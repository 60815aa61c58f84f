package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	// Args are added to the command line (cluster mode); Conf, when set, is a
	// config file written to the server's dir and passed first (Sentinel mode).
	Args []string
	Conf string
	dir  string
	port int
	cmd  *exec.Cmd
}

// ErrNoRedisServer: redis-server is not installed.
var ErrNoRedisServer = errors.New("redis-server is not installed")

// NewRedisServer starts redis-server without persistence, its files in dir.
func NewRedisServer(dir string) (*RedisServer, error) {
	r, err := newRedisServer(dir, false)
	if err != nil {
		return nil, err
	}
	return r, r.Run()
}

// newRedisServer picks a free loopback port (and, for a cluster node, a free bus
// port at port+10000) without starting anything.
func newRedisServer(dir string, bus bool) (*RedisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, ErrNoRedisServer
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if bus {
			if port+10000 > 65535 {
				continue
			}
			lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
			if err != nil {
				continue
			}
			lb.Close()
		}
		return &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, port: port}, nil
	}
	return nil, errors.New("no free port pair for a cluster node")
}

// StartRedis is NewRedisServer for a test: it skips when redis-server is not
// installed (unless CAMPROXY_REQUIRE_REDIS=1) and kills the server at cleanup.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	r, err := NewRedisServer(t.TempDir())
	requireStarted(t, err)
	t.Cleanup(r.Kill)
	return r
}

// requireStarted skips the test when redis-server is not installed (unless
// CAMPROXY_REQUIRE_REDIS=1) and fails it when the server did not start.
func requireStarted(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoRedisServer) && os.Getenv("CAMPROXY_REQUIRE_REDIS") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
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
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--protected-mode", "no", "--dir", r.dir}, aof...)
	if r.Conf != "" {
		conf := filepath.Join(r.dir, "redis.conf")
		if _, err := os.Stat(conf); err != nil { // a restart keeps what Sentinel wrote there
			if err := os.WriteFile(conf, []byte(r.Conf), 0o600); err != nil {
				return err
			}
		}
		args = []string{conf, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--protected-mode", "no", "--dir", r.dir}
	}
	r.cmd = exec.Command("redis-server", append(args, r.Args...)...)
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
