package proxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// upCall is one upstream call's deadline and cancel. The goroutine that runs the call
// moves the deadline; any goroutine may cancel it (client gone, shutdown). Either
// makes a blocked dial, write or read return by moving the connection's deadline (a
// dial in progress is left behind: see dial in client.go).
type upCall struct {
	mu       sync.Mutex
	conn     net.Conn // the connection, once dialled
	deadline time.Time
	cause    error         // why the call was cancelled (errClientGone, errShutdown); nil if it was not
	done     chan struct{} // closed by cancel; made only for a call that waits on it (a dial)
}

// errShutdown is the cause of a call cut because shutdown's grace period ended.
var errShutdown = errors.New("camproxy is shutting down: the call outlived the shutdown grace period")

// past is a deadline that has passed: it makes any blocked read or write return.
var past = time.Unix(1, 0)

// cancel stops the call for cause: the dial, write or read in progress fails, and
// so does every later one. Safe from any goroutine, any number of times; the first
// cause is kept.
func (c *upCall) cancel(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause == nil {
		c.cause = cause
		if c.done != nil {
			close(c.done)
		}
	}
	if c.conn != nil {
		_ = c.conn.SetDeadline(past)
	}
}

// stopped is closed when the call is cancelled.
func (c *upCall) stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.cause != nil {
			close(c.done)
		}
	}
	return c.done
}

// cancelled is the cause of a cancel, nil if there was none.
func (c *upCall) cancelled() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// setDeadline bounds what the call does from now on (zero: nothing), unless it was
// cancelled (its deadline stays in the past).
func (c *upCall) setDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return
	}
	c.deadline = t
	if c.conn != nil {
		_ = c.conn.SetDeadline(t)
	}
}

// beforeRead gives the next read of the answer idle to bring something (no bound when
// idle is 0): the idle timeout, for buffered answers and streams alike.
func (c *upCall) beforeRead(idle time.Duration) {
	var t time.Time
	if idle > 0 {
		t = time.Now().Add(idle)
	}
	c.setDeadline(t)
}

// timeLeft is the time until the call's deadline, at most limit.
func (c *upCall) timeLeft(limit time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline.IsZero() {
		return limit
	}
	return min(time.Until(c.deadline), limit)
}

// expired says whether the call's deadline has passed.
func (c *upCall) expired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// attach gives the call its connection, with the deadline set so far; false if the
// call was cancelled meanwhile (the caller closes conn).
func (c *upCall) attach(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return false
	}
	c.conn = conn
	_ = conn.SetDeadline(c.deadline)
	return true
}

// detach takes the connection away before it is pooled or closed, so that a late
// cancel cannot touch a connection another call now uses; it says whether the call
// was cancelled.
func (c *upCall) detach() (cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = nil
	return c.cause != nil
}

// failure names why a call failed: cancelled (the cause), out of time (a timeout
// error saying which deadline, what), or the upstream's own error as it was.
func (c *upCall) failure(err error, what string) error {
	if cause := c.cancelled(); cause != nil {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	if c.expired() {
		return &timeoutError{fmt.Sprintf("%s: %v", what, err)}
	}
	return err
}

// timeoutError is a call that ran out of time (a net.Error whose Timeout is true).
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }
