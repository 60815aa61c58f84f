package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
)

// The idle-stream check runs each server in a process of its own: a stream through
// camproxy holds two sockets there (client and upstream) and the client and the
// upstream one each, so one process could hold only a quarter of the streams under the
// per-process file limit; and a process of its own is camproxy's RSS alone.

// runRole serves one part of the idle-stream check in a child process until its
// standard input closes.
func runRole(role, dataPath, upstreamAddr string) error {
	var addr string
	var err error
	switch role {
	case "upstream":
		convs, lerr := loadConvs(dataPath, 12)
		if lerr != nil {
			return lerr
		}
		addr, err = newUpstream(convs, 0, 0).start("127.0.0.1:0")
	case "floor":
		addr, err = newFloor(upstreamAddr).start("127.0.0.1:0")
	case "camproxy":
		cam := testkit.NewCAM()
		defer cam.Close()
		dir, derr := os.MkdirTemp("", "camproxy-idle-")
		if derr != nil {
			return derr
		}
		defer os.RemoveAll(dir)
		// 10 000 idle streams are 10 000 calls in flight: past server.max_in_flight
		// (512 on 2 cores) they would wait and be refused. An operator holding that many
		// streams raises it the same way (docs/operations.md#overload).
		overloadLimit = idleInFlight
		a, aerr := startCamproxy(upstreamAddr, cam.URL, dir, nil)
		if aerr != nil {
			return aerr
		}
		addr = a.Addr()
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", addr)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it (or dies)
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

func startChild(args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	type started struct {
		line string
		err  error
	}
	got := make(chan started, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		got <- started{line, err}
	}()
	var st started
	select {
	case st = <-got:
	case <-time.After(childStartTimeout):
		st.err = fmt.Errorf("no address within %v", childStartTimeout)
	}
	if st.err != nil || !strings.HasPrefix(st.line, "ADDR ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child %v did not start: %q %w", args, st.line, st.err)
	}
	return &child{cmd: cmd, stdin: stdin, addr: strings.TrimSpace(strings.TrimPrefix(st.line, "ADDR "))}, nil
}

func (c *child) stop() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// procMem reads a process's resident set and its peak, in bytes.
func procMem(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm
}

// IdleResult is the idle-stream check of one proxy.
type IdleResult struct {
	Proxy         string  `json:"proxy"`
	Streams       int     `json:"streams"`
	Failed        int     `json:"failed"`
	RSSBeforeMiB  float64 `json:"rss_before_mib"`
	RSSMiB        float64 `json:"rss_mib"`
	PeakMiB       float64 `json:"peak_mib"`
	PerStreamKiB  float64 `json:"per_stream_kib"`
	Projected10k  float64 `json:"projected_10k_mib"`
	OpenSeconds   float64 `json:"open_seconds"`
	FileLimit     uint64  `json:"file_limit"`
	StreamsWanted int     `json:"streams_wanted"`
}

// idleStreams opens n streams through a proxy child that each get their first event
// and then stay open with nothing flowing, and reads the proxy's RSS.
func idleStreams(role, upstreamAddr, dataPath string, c0 *conv, n int) (*IdleResult, error) {
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	want := n
	if max := int(lim.Cur)/2 - 150; n > max {
		n = max
	}
	px, err := startChild("-role", role, "-upstream", upstreamAddr, "-data", dataPath)
	if err != nil {
		return nil, err
	}
	defer px.stop()
	tg := newTarget(role, px.addr)
	tg.hc.ReadTimeout, tg.hc.WriteTimeout = idleCallTimeout, idleCallTimeout
	for i := range 50 { // warm: connections, the CAM cache, the pools
		body := c0.body(nil, 0, instances.Add(1), i%2 == 0)
		if r := tg.call(body, replyKey(nil, c0, 0), i%2 == 0, "", time.Now()); r.err != nil {
			return nil, r.err
		}
	}
	tg.hc.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	pid := px.cmd.Process.Pid
	before, _ := procMem(pid)

	conns := make([]net.Conn, 0, n)
	var mu sync.Mutex
	var failed int
	var firstErr error
	var refusals int
	work := make(chan int)
	start := time.Now()
	// The whole opening has a deadline: a proxy that stops admitting streams fails
	// the part with the count it reached instead of holding the run forever.
	deadline := start.Add(idleOpenTimeout(n))
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			var buf [4096]byte
			for range work {
				conn, err := openIdle(px.addr, c0, buf[:], deadline)
				// Refused while the box was saturated by the opening itself: retried
				// after a pause with jitter, as the SDKs retry a 503.
				for errors.Is(err, errRefused) {
					mu.Lock()
					refusals++
					mu.Unlock()
					pause := 50*time.Millisecond + rand.N(100*time.Millisecond)
					if time.Now().Add(pause).After(deadline) {
						err = fmt.Errorf("%w until the deadline", err)
						break
					}
					time.Sleep(pause)
					conn, err = openIdle(px.addr, c0, buf[:], deadline)
				}
				mu.Lock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					conns = append(conns, conn)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		if time.Now().After(deadline) {
			mu.Lock()
			failed += n - i // never tried
			mu.Unlock()
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	open := time.Since(start)
	time.Sleep(time.Second)
	rss, hwm := procMem(pid)
	for _, c := range conns {
		_ = c.Close()
	}
	if len(conns) == 0 {
		return nil, fmt.Errorf("no idle stream opened through %s: %v", role, firstErr)
	}
	if time.Now().After(deadline) && len(conns) < n {
		return nil, fmt.Errorf("%s opened only %d of %d idle streams within %v (%d refusals with 503 on the way); first error: %w",
			role, len(conns), n, idleOpenTimeout(n), refusals, firstErr)
	}
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "idle streams through %s: %d failed, first: %v\n", role, failed, firstErr)
	}
	per := float64(rss-before) / float64(len(conns))
	return &IdleResult{Proxy: role, Streams: len(conns), Failed: failed, RSSBeforeMiB: mib(before), RSSMiB: mib(rss), PeakMiB: mib(hwm),
		PerStreamKiB: per / 1024, Projected10k: mib(before + int64(per*10000)), OpenSeconds: open.Seconds(),
		FileLimit: lim.Cur, StreamsWanted: want}, nil
}

// openIdle starts one streaming call that the upstream holds open after its first
// event, and returns once that event has arrived: within idleCallTimeout, and never
// past deadline.
func openIdle(addr string, c0 *conv, buf []byte, deadline time.Time) (net.Conn, error) {
	end := time.Now().Add(idleCallTimeout)
	if deadline.Before(end) {
		end = deadline
	}
	conn, err := net.DialTimeout("tcp", addr, time.Until(end))
	if err != nil {
		return nil, err
	}
	body := c0.body(nil, 0, instances.Add(1), true)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"+
		"%s: 1\r\n%s: 1\r\n%s: %d.0\r\nContent-Length: %d\r\n\r\n", addr, hdrStream, hdrIdle, hdrReply, c0.id, len(body))
	_ = conn.SetDeadline(end)
	if _, err := conn.Write(append([]byte(req), body...)); err != nil {
		conn.Close()
		return nil, err
	}
	var got []byte
	for !bytes.Contains(got, []byte("data: ")) {
		if len(got) >= 12 && !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
			break // a refusal (503 while camproxy's CPU is saturated) has no event to wait for
		}
		n, err := conn.Read(buf)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("reading the first event: %w (got %q)", err, got)
		}
		got = append(got, buf[:n]...)
	}
	if bytes.HasPrefix(got, []byte("HTTP/1.1 503")) {
		conn.Close()
		return nil, errRefused
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		conn.Close()
		return nil, fmt.Errorf("status: %.80q", got)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// The idle part's deadlines: a child prints its address, one call (the warm-up's, or
// opening a stream up to its first event) answers, and all the streams open (two
// minutes, and 20 ms per stream: 10 000 opened through camproxy in under two minutes
// on 2 cores shared with other builds, its admission cutting the limit on the
// neighbours' CPU use; through the floor in 15 s).
const (
	childStartTimeout = time.Minute
	idleCallTimeout   = 30 * time.Second
)

func idleOpenTimeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*20*time.Millisecond
}

// idleInFlight is the idle-stream child's server.max_in_flight: above the streams it holds.
const idleInFlight = 1 << 15

// errRefused is a stream refused with 503 (camproxy's admission limit).
var errRefused = errors.New("refused with 503")
