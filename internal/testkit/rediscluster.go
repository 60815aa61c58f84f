package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/redisx"
)

// RedisCluster is a real Redis Cluster of redis-server processes on free loopback
// ports (3 masters and a replica each, as `redis-cli --cluster create
// --cluster-replicas 1` makes it), with a short node timeout so that a killed master
// fails over to its replica in a second or two.
type RedisCluster struct {
	Nodes []*RedisServer
}

// NodeTimeout is the cluster's cluster-node-timeout: a master silent this long is
// failed over.
const NodeTimeout = time.Second

// NewRedisCluster starts 6 nodes with their files under dir and creates the cluster;
// it returns once every slot is served and every node says cluster_state:ok. Close
// it when done.
func NewRedisCluster(dir string) (*RedisCluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, ErrNoRedisServer
	}
	c := &RedisCluster{}
	for i := range 6 {
		ndir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, err
		}
		n, err := newRedisServer(ndir, true)
		if err != nil {
			c.Close()
			return nil, err
		}
		n.Args = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
			"--cluster-replica-validity-factor", "0", "--appendonly", "no"}
		if err := n.Run(); err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitOK(30 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartRedisCluster is NewRedisCluster for one test: it skips when redis-server is
// not installed (unless CAMPROXY_REQUIRE_REDIS=1) and stops the cluster at cleanup.
// A package whose tests share a cluster starts one in TestMain instead.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c, err := NewRedisCluster(t.TempDir())
	requireStarted(t, err)
	t.Cleanup(c.Close)
	return c
}

// URL is the cluster's URL in the form camproxy takes: one node as the host, the
// others as addr= seeds.
func (c *RedisCluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr
	for i, n := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr
	}
	return u
}

// Client is a cluster client for the test's own checks, made as camproxy makes its
// own (redisx: it finds a failed-over master after a failed call); the caller
// closes it.
func (c *RedisCluster) Client() redis.UniversalClient {
	u, err := redisx.Parse(c.URL())
	if err != nil {
		panic(err) // URL is ours
	}
	rdb, err := u.Client()
	if err != nil {
		panic(err)
	}
	return rdb
}

// MasterOf returns the node serving key's slot as master now.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (*RedisServer, error) {
	slot := Slot(key)
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		slots, err := rdb.ClusterSlots(ctx).Result()
		_ = rdb.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
				return c.node(s.Nodes[0].Addr)
			}
		}
	}
	return nil, fmt.Errorf("no live node knows slot %d", slot)
}

func (c *RedisCluster) node(addr string) (*RedisServer, error) {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s is not a node of this cluster", addr)
}

// Restart starts a killed node again; it rejoins as its slot's replica.
func (c *RedisCluster) Restart(n *RedisServer) error { return n.Run() }

// Healthy reports whether every live node says cluster_state:ok and serves every
// slot from a live master: after a failover, the cluster serves every key again.
func (c *RedisCluster) Healthy(ctx context.Context) bool {
	live := map[string]bool{}
	for _, n := range c.Nodes {
		if n.cmd != nil {
			live[n.Addr] = true
		}
	}
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := rdb.ClusterInfo(ctx).Result()
		slots, serr := rdb.ClusterSlots(ctx).Result()
		_ = rdb.Close()
		if err != nil || serr != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return false
		}
		served := 0
		for _, s := range slots {
			if len(s.Nodes) == 0 || !live[s.Nodes[0].Addr] {
				return false
			}
			served += s.End - s.Start + 1
		}
		if served != 16384 {
			return false
		}
	}
	return true
}

func (c *RedisCluster) waitOK(d time.Duration) error {
	ctx := context.Background()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c.Healthy(ctx) {
			return nil
		}
	}
	return errors.New("the Redis Cluster did not reach cluster_state:ok")
}

// Close kills every node.
func (c *RedisCluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Slot is the Redis Cluster hash slot of key (CRC16 of its hash tag, mod 16384).
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// RedisSentinel is a master, its replica and three sentinels watching them (quorum
// 2), each a redis-server process on a free loopback port, with a short
// down-after-milliseconds so that a killed master fails over in a few seconds.
type RedisSentinel struct {
	Master    string         // the monitored name
	Servers   []*RedisServer // the data nodes: [0] starts as master, [1] as its replica
	Sentinels []*RedisServer
}

// NewRedisSentinel starts the five processes under dir and returns once every
// sentinel is connected to the master, its replica (in sync) and the other two
// sentinels. Close it when done.
func NewRedisSentinel(dir string) (*RedisSentinel, error) {
	s := &RedisSentinel{Master: "camproxy"}
	alloc := func(name string) (*RedisServer, error) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		return newRedisServer(d, false)
	}
	m, err := alloc("master")
	if err != nil {
		return nil, err
	}
	// No diskless-sync delay: the master syncs its replica at once, not 5 s later in
	// case more replicas come.
	m.Args = []string{"--repl-diskless-sync-delay", "0"}
	if err := m.Run(); err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, m)
	host, port, _ := strings.Cut(m.Addr, ":")
	rep, err := alloc("replica")
	if err != nil {
		s.Close()
		return nil, err
	}
	rep.Args = []string{"--replicaof", host, port, "--repl-diskless-sync-delay", "0"} // it may be promoted
	if err := rep.Run(); err != nil {
		s.Close()
		return nil, err
	}
	s.Servers = append(s.Servers, rep)
	// Each sentinel's config names the replica and the other sentinels, as Sentinel
	// writes them into its own config once it has found them: otherwise each would
	// take seconds to learn them (the master's INFO, then hello messages every 2 s).
	sentinels := make([]*RedisServer, 3)
	for i := range sentinels {
		if sentinels[i], err = alloc("sentinel" + strconv.Itoa(i)); err != nil {
			s.Close()
			return nil, err
		}
	}
	id := func(r *RedisServer) string { return fmt.Sprintf("%040x", r.port) }
	rhost, rport, _ := strings.Cut(rep.Addr, ":")
	for _, sn := range sentinels {
		conf := fmt.Sprintf("sentinel myid %s\nsentinel monitor %s %s %s 2\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\nsentinel known-replica %s %s %s\n",
			id(sn), s.Master, host, port, s.Master, s.Master, s.Master, s.Master, rhost, rport)
		for _, other := range sentinels {
			if other != sn {
				ohost, oport, _ := strings.Cut(other.Addr, ":")
				conf += fmt.Sprintf("sentinel known-sentinel %s %s %s %s\n", s.Master, ohost, oport, id(other))
			}
		}
		sn.Conf, sn.Args = conf, []string{"--sentinel"}
	}
	// Started together: a sentinel that finds another one not listening yet retries
	// only a second later.
	errs := make([]error, len(sentinels))
	var wg sync.WaitGroup
	for i, sn := range sentinels {
		wg.Go(func() { errs[i] = sn.Run() })
	}
	wg.Wait()
	s.Sentinels = sentinels
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, err
	}
	ctx := context.Background()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if s.settled(ctx) {
			return s, nil
		}
	}
	s.Close()
	return nil, errors.New("the sentinels did not reach the master, the replica in sync and each other")
}

// StartRedisSentinel is NewRedisSentinel for one test (see StartRedisCluster).
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	s, err := NewRedisSentinel(t.TempDir())
	requireStarted(t, err)
	t.Cleanup(s.Close)
	return s
}

// settled: every sentinel is connected to the master and to its one replica, which
// is in sync, and knows the other two sentinels (the links between sentinels come
// up within a second, long before a test kills a master and they vote).
func (s *RedisSentinel) settled(ctx context.Context) bool {
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		m, err := sc.Master(ctx, s.Master).Result()
		reps, rerr := sc.Replicas(ctx, s.Master).Result()
		_ = sc.Close()
		if err != nil || rerr != nil || m["flags"] != "master" || m["num-other-sentinels"] != "2" || len(reps) != 1 ||
			reps[0]["flags"] != "slave" || reps[0]["master-link-status"] != "ok" {
			return false
		}
	}
	return true
}

// URL is the Sentinel URL in the form camproxy takes.
func (s *RedisSentinel) URL() string {
	return fmt.Sprintf("redis://%s/0?master_name=%s&addr=%s&addr=%s", s.Sentinels[0].Addr, s.Master, s.Sentinels[1].Addr, s.Sentinels[2].Addr)
}

// CurrentMaster is the data node the sentinels name as master now.
func (s *RedisSentinel) CurrentMaster(ctx context.Context) (*RedisServer, error) {
	for _, sn := range s.Sentinels {
		if sn.cmd == nil {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		addr, err := sc.GetMasterAddrByName(ctx, s.Master).Result()
		_ = sc.Close()
		if err != nil || len(addr) != 2 {
			continue
		}
		for _, r := range s.Servers {
			if r.Addr == addr[0]+":"+addr[1] {
				return r, nil
			}
		}
	}
	return nil, errors.New("no sentinel names a master")
}

// Close kills every process.
func (s *RedisSentinel) Close() {
	for _, r := range append(append([]*RedisServer(nil), s.Sentinels...), s.Servers...) {
		r.Kill()
	}
}

// SharedCluster is one Redis Cluster for a package's tests, started at its first use
// (a cluster takes seconds to form) and stopped when they end:
//
//	var cluster testkit.SharedCluster
//	func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }
type SharedCluster struct {
	once sync.Once
	dir  string
	c    *RedisCluster
	err  error
}

// Get returns the cluster, starting it on the first call; it skips the test when
// redis-server is absent (unless CAMPROXY_REQUIRE_REDIS=1).
func (s *SharedCluster) Get(t testing.TB) *RedisCluster {
	t.Helper()
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "camproxy-cluster-"); s.err == nil {
			s.c, s.err = NewRedisCluster(s.dir)
		}
	})
	requireStarted(t, s.err)
	return s.c
}

// Run runs the package's tests, then stops the cluster; it returns their exit code.
func (s *SharedCluster) Run(m *testing.M) int {
	defer s.Close()
	return m.Run()
}

// Close stops the cluster if it was started and removes its files.
func (s *SharedCluster) Close() {
	if s.c != nil {
		s.c.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// RedisURLClient is a client for url made as camproxy makes its own (redisx), with
// short timeouts and no periodic cluster reload: only the reload on a failed call
// may find a failed-over master. It is closed at cleanup.
func RedisURLClient(t testing.TB, url string) redis.UniversalClient {
	t.Helper()
	u, err := redisx.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Tune(redisx.Tuning{DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: 1, DialerRetries: 1, ClusterReload: time.Hour})
	rdb, err := u.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
