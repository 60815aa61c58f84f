package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/protocol"
)

// RecorderOptions configure the recorder.
type RecorderOptions struct {
	Queue        int    // events held in memory before they overflow to the spool
	SpoolDir     string // one sub-directory per sink
	Logger       *slog.Logger
	Metrics      *metrics.Metrics // may be nil
	RetryEvery   time.Duration    // how often a down sink is retried from its spool; default 1s
	WriteTimeout time.Duration    // one sink write; default 10s
	// KeepMedia records the bytes of images, audio and files given inline; without
	// it a step keeps their SHA-256 and media type (protocol.StripMedia).
	KeepMedia bool
}

// Named pairs a sink with the URI it was opened from (spool directory and logs).
type Named struct {
	Sink
	URI string
}

// Recorder takes events off the request path: Add never blocks on I/O it can avoid
// and never fails. Add only queues the event; the sinks' writers take the queue in
// batches (a writer wakes when the queue starts and when its batch is full or its
// wait is over, not once per event), encode it once for all sinks and fan the lines
// out to each writer's batch. A writer batches, and when its sink is down or behind
// it spools to disk and drains the spool when the sink is back. Nothing accepted is
// dropped unless the spool itself cannot be written, which is logged as an error and
// counted.
type Recorder struct {
	log       *slog.Logger
	m         *metrics.Metrics
	keepMedia bool
	queue     int // events held in memory, queued or in a writer's batch, before they overflow to the spool
	writers   []*sinkWriter
	kickEvery int // the smallest writer batch: Add wakes the writers at each multiple
	// pool holds the buffers of encoded rounds when every sink copies what it is
	// given (lineCopier); nil: each round's buffer is the garbage collector's.
	pool *sync.Pool

	mu      sync.Mutex // guards pending and closed
	pending []item     // accepted, not yet encoded, in order
	spare   []item     // the pending slice last taken, reused
	closed  bool

	encMu sync.Mutex // one encoding round at a time, so that each writer gets rounds in order
	stop  chan struct{}
	done  chan struct{}
}

type item struct {
	ev   any // *EpisodeEvent, *StepEvent or *RewardEvent
	line []byte
	typ  string
	rnd  *round // the buffer line is in; nil: the line is its own allocation
}

// round is the buffer of one encoding round's lines, given back to the recorder's
// pool once every writer is done with every line in it.
type round struct {
	buf  []byte
	refs atomic.Int64
}

// lineCopier is a sink that keeps no line it was given once Write returned (it
// copies them): the recorder may reuse their memory.
type lineCopier interface{ copiesLines() }

// NewRecorder starts the recorder's goroutines. Leftover spool segments from an
// earlier process are drained as soon as their sinks answer.
func NewRecorder(sinks []Named, o RecorderOptions) (*Recorder, error) {
	if o.Queue <= 0 {
		o.Queue = 10000
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := &Recorder{log: o.Logger, m: o.Metrics, keepMedia: o.KeepMedia, queue: o.Queue, kickEvery: o.Queue,
		stop: make(chan struct{}), done: make(chan struct{})}
	copying := true
	for _, s := range sinks {
		sp, err := openSpool(filepath.Join(o.SpoolDir, spoolName(s)))
		if err != nil {
			return nil, err
		}
		policy := BatchPolicy{MaxEvents: 256, MaxWait: 50 * time.Millisecond}
		if bp, ok := s.Sink.(interface{ BatchPolicy() BatchPolicy }); ok {
			policy = bp.BatchPolicy()
		}
		policy.MaxEvents = max(policy.MaxEvents, 1)
		w := &sinkWriter{r: r, sink: s, spool: sp, policy: policy, full: min(policy.MaxEvents, o.Queue), kick: make(chan struct{}, 1),
			retry: o.RetryEvery, timeout: o.WriteTimeout, label: s.Name()}
		w.setSpooled()
		r.writers = append(r.writers, w)
		r.kickEvery = min(r.kickEvery, w.full)
		_, c := s.Sink.(lineCopier)
		copying = copying && c
	}
	if copying {
		r.pool = &sync.Pool{}
	}
	var wg sync.WaitGroup
	for _, w := range r.writers {
		wg.Go(w.run)
	}
	go func() {
		<-r.stop
		wg.Wait()
		close(r.done)
	}()
	return r, nil
}

// spoolName is a stable directory name per sink URI.
func spoolName(s Named) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.URI))
	return fmt.Sprintf("%s-%016x", s.Name(), h.Sum64())
}

// Add accepts an event. It returns at once: when the queue is full the event is
// encoded and spooled on the caller's goroutine (a local append), never dropped.
// It wakes the writers only when the queue starts and at each writer batch's worth
// of events: an event that joins a waiting batch costs no goroutine hand-off.
func (r *Recorder) Add(ev any) {
	if len(r.writers) == 0 {
		return // no sink: nothing would ever take the queue
	}
	typ := eventType(ev)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.log.Error("replay event after shutdown; spooling it", "type", typ)
		r.overflow(item{ev: ev, typ: typ})
		return
	}
	n := len(r.pending)
	if n >= r.queue {
		r.mu.Unlock()
		r.overflow(item{ev: ev, typ: typ})
		return
	}
	r.pending = append(r.pending, item{ev: ev, typ: typ})
	r.mu.Unlock()
	if r.m != nil {
		r.m.ReplayQueue.Inc()
	}
	if n == 0 || (n+1)%r.kickEvery == 0 {
		for _, w := range r.writers {
			select {
			case w.kick <- struct{}{}:
			default: // woken already
			}
		}
	}
}

func eventType(ev any) string {
	switch ev.(type) {
	case *EpisodeEvent:
		return TypeEpisode
	case *StepEvent:
		return TypeStep
	case *RewardEvent:
		return TypeReward
	}
	return "unknown"
}

func (r *Recorder) overflow(it item) {
	line, err := r.encode(nil, it.ev)
	if err != nil {
		r.log.Error("replay event cannot be encoded", "type", it.typ, "err", err)
		return
	}
	it.line, it.ev = line, nil
	for _, w := range r.writers {
		w.spoolBatch([]item{it})
	}
}

// queued is how many events wait to be encoded.
func (r *Recorder) queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// encodeQueued encodes the queued events, in order, into one buffer and appends
// their lines to every writer's batch. A writer whose batch would hold more than the
// queue's worth of events (its sink is behind) has that batch spooled instead, in
// order, rather than block the others; its later events then follow it into the
// spool (write spools while a backlog is there), so its order is kept.
func (r *Recorder) encodeQueued() {
	r.encMu.Lock()
	defer r.encMu.Unlock()
	r.mu.Lock()
	evs := r.pending
	r.pending = r.spare[:0]
	r.spare = nil
	r.mu.Unlock()
	if len(evs) == 0 {
		r.mu.Lock()
		r.spare = evs
		r.mu.Unlock()
		return
	}
	if r.m != nil {
		r.m.ReplayQueue.Sub(float64(len(evs)))
	}
	rnd := r.newRound(evs)
	out := evs[:0] // encoded in place
	for _, it := range evs {
		start := len(rnd.buf)
		buf, err := r.encode(rnd.buf, it.ev)
		if err != nil {
			r.log.Error("replay event cannot be encoded", "type", it.typ, "err", err)
			continue
		}
		rnd.buf = buf
		out = append(out, item{line: buf[start:len(buf):len(buf)], typ: it.typ, rnd: rnd})
	}
	clear(evs[len(out):]) // what an encoding error left: no event kept alive
	if r.pool != nil {
		rnd.refs.Store(int64(len(out) * len(r.writers)))
		if len(out) == 0 {
			r.pool.Put(rnd)
		}
	} else {
		for i := range out {
			out[i].rnd = nil
		}
	}
	for _, w := range r.writers {
		w.mu.Lock()
		over := len(w.queue)+len(out) > r.queue
		if !over {
			w.queue = append(w.queue, out...)
		}
		w.mu.Unlock()
		if over {
			w.spillQueue(out)
		}
	}
	clear(out)
	r.mu.Lock()
	if cap(evs) <= maxGroup { // a burst's slice is not kept
		r.spare = evs[:0]
	}
	r.mu.Unlock()
}

// newRound is a buffer for the lines of evs, sized for them (stepSize), from the
// pool when there is one.
func (r *Recorder) newRound(evs []item) *round {
	n := 0
	for _, it := range evs {
		if s, ok := it.ev.(*StepEvent); ok {
			n += stepSize(s)
		} else {
			n += 512
		}
	}
	var rnd *round
	if r.pool != nil {
		rnd, _ = r.pool.Get().(*round)
	}
	if rnd == nil {
		rnd = &round{}
	}
	if cap(rnd.buf) < n {
		rnd.buf = make([]byte, 0, n)
	}
	rnd.buf = rnd.buf[:0]
	return rnd
}

// release gives back the lines of items a writer is done with (written, spooled or
// lost): a round's buffer goes back to the pool after its last line.
func (r *Recorder) release(items []item) {
	if r.pool == nil {
		return
	}
	for _, it := range items {
		if it.rnd != nil && it.rnd.refs.Add(-1) == 0 {
			if cap(it.rnd.buf) <= maxPooledRound {
				r.pool.Put(it.rnd)
			}
		}
	}
}

// maxPooledRound is the largest round buffer kept for reuse: one burst must not pin
// its memory for the life of the process.
const maxPooledRound = 4 << 20

// encode appends an event's line to b. Media bytes are dropped here, on the
// recorder's goroutine, so that hashing them never costs the request path; the event
// is the recorder's once added, and the messages it shares with the request are not
// touched.
func (r *Recorder) encode(b []byte, ev any) ([]byte, error) {
	if s, ok := ev.(*StepEvent); ok && !r.keepMedia {
		s.Messages = protocol.StripMedia(s.Messages)
		if s.Response != nil && protocol.HoldsMedia(s.Response) {
			resp := protocol.StripMessageMedia(*s.Response)
			s.Response = &resp
		}
	}
	switch e := ev.(type) {
	case *StepEvent:
		if b == nil {
			b = make([]byte, 0, stepSize(e))
		}
		return appendStep(b, e), nil
	case *EpisodeEvent:
		if line, err := appendEpisode(b, e); err == nil {
			return line, nil
		} // else encoding/json says why
	}
	line, err := json.Marshal(ev)
	if err != nil {
		return b, err
	}
	if b == nil {
		return line, nil
	}
	return append(b, line...), nil
}

// Close stops accepting, flushes every queued event to its sink (or its spool) and
// waits until that is done or ctx ends.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	r.mu.Unlock()
	if first {
		go func() {
			// Every accepted event into the writers' batches before they finish:
			// none is accepted after closed was set.
			r.encodeQueued()
			close(r.stop)
		}()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("replay: flush on shutdown: %w", ctx.Err())
	}
	var errs []error
	for _, w := range r.writers {
		w.mu.Lock()
		w.spool.close()
		w.mu.Unlock()
		errs = append(errs, w.sink.Close())
	}
	return errors.Join(errs...)
}

// Spooled is how many events wait in the spools, per sink label (tests, readiness).
func (r *Recorder) Spooled() map[string]int {
	out := map[string]int{}
	for _, w := range r.writers {
		w.mu.Lock()
		out[w.sink.URI] += w.spool.pending
		w.mu.Unlock()
	}
	return out
}

// Backlog is what the recorder holds back from its sinks at one moment.
type Backlog struct {
	Queue   int            // events in memory, not yet encoded
	Spooled map[string]int // events in the local spools, by sink name (file, redis, s3)
}

// Backlog reads the queue and the spools (the dashboard). It takes each spool's lock
// for a moment, as an overflowing Add does; it never waits for a sink.
func (r *Recorder) Backlog() Backlog {
	b := Backlog{Queue: r.queued(), Spooled: make(map[string]int, len(r.writers))}
	for _, w := range r.writers {
		w.mu.Lock()
		b.Spooled[w.label] += w.spool.pending
		w.mu.Unlock()
	}
	return b
}

// sinkWriter owns one sink, its batch and its spool.
type sinkWriter struct {
	r       *Recorder
	sink    Named
	label   string
	policy  BatchPolicy
	full    int           // events that make a batch: the policy's, at most the queue
	kick    chan struct{} // Add: events are queued
	retry   time.Duration
	timeout time.Duration

	mu    sync.Mutex // guards spool and queue: the writer, encoding rounds and overflowing callers share them
	spool *spool
	down  bool
	queue []item // encoded lines waiting for this sink's next batch, in order
}

func (w *sinkWriter) run() {
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	armed := false // flush runs: a batch is being gathered
	retry := time.NewTicker(w.retry)
	defer retry.Stop()
	w.drain() // leftovers of an earlier process
	for {
		select {
		case <-w.kick:
			if w.waiting() >= w.full {
				// Group commit: the events that queued up during the last write go
				// into this one, so one write and fsync cover them and a sink that
				// fell behind catches up instead of spilling into the spool.
				flush.Stop()
				armed = false
				w.flush()
			} else if !armed {
				flush.Reset(w.policy.MaxWait)
				armed = true
			}
		case <-flush.C:
			armed = false
			w.flush()
		case <-retry.C:
			w.drain()
		case <-w.r.stop: // shutting down: every accepted event is in queue
			flush.Stop()
			w.finish(w.take())
			return
		}
		if !armed && w.waiting() > 0 {
			flush.Reset(w.policy.MaxWait)
			armed = true
		}
	}
}

// waiting is how many events this writer's next batch would hold.
func (w *sinkWriter) waiting() int {
	w.mu.Lock()
	n := len(w.queue)
	w.mu.Unlock()
	return n + w.r.queued()
}

// take empties the writer's queue.
func (w *sinkWriter) take() []item {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

// flush encodes what is queued and writes the writer's batch.
func (w *sinkWriter) flush() {
	w.r.encodeQueued()
	w.write(w.take())
}

// spillQueue spools the writer's queue and then more (an encoding round that would
// overfill it), in order.
func (w *sinkWriter) spillQueue(more []item) {
	batch := append(w.take(), more...)
	for len(batch) > 0 {
		n := min(len(batch), spillBatch)
		w.spoolBatch(batch[:n])
		batch = batch[n:]
	}
}

// maxGroup bounds a group-committed batch: events, or the sink's own batch size if larger.
const maxGroup = 4096

// spillBatch is how many events a sink that is behind has spooled at once.
const spillBatch = 256

// finish writes what is left at shutdown: a sink known to be down is not waited for.
func (w *sinkWriter) finish(batch []item) {
	w.mu.Lock()
	down := w.down
	w.mu.Unlock()
	if down {
		w.spoolBatch(batch)
		return
	}
	w.write(batch)
	w.drain()
}

// write sends a batch, at most maxGroup events (or the sink's batch) at a time, or
// spools it when the sink fails or still has a backlog (so the backlog goes first).
func (w *sinkWriter) write(batch []item) {
	for len(batch) > 0 {
		n := min(len(batch), max(maxGroup, w.policy.MaxEvents))
		w.writeOne(batch[:n])
		batch = batch[n:]
	}
}

func (w *sinkWriter) writeOne(batch []item) {
	w.mu.Lock()
	backlog := w.spool.pending > 0
	w.mu.Unlock()
	if backlog {
		w.spoolBatch(batch)
		return
	}
	if err := w.send(lines(batch)); err != nil {
		w.markDown(err)
		w.spoolBatch(batch)
		return
	}
	w.count(batch, "written")
	w.r.release(batch)
}

func lines(batch []item) [][]byte {
	out := make([][]byte, len(batch))
	for i, it := range batch {
		out[i] = it.line
	}
	return out
}

func (w *sinkWriter) send(lines [][]byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	return w.sink.Write(ctx, lines)
}

func (w *sinkWriter) markDown(err error) {
	w.mu.Lock()
	wasDown := w.down
	w.down = true
	w.mu.Unlock()
	if !wasDown {
		w.r.log.Warn("replay sink failed; spooling events until it is back", "sink", w.sink.URI, "err", err)
	}
}

func (w *sinkWriter) spoolBatch(batch []item) {
	if len(batch) == 0 {
		return
	}
	w.mu.Lock()
	err := w.spool.append(lines(batch))
	w.mu.Unlock()
	w.r.release(batch)
	if err != nil {
		w.r.log.Error("REPLAY EVENTS LOST: the spool cannot be written", "sink", w.sink.URI, "events", len(batch), "err", err)
		w.count(batch, "lost")
		return
	}
	w.count(batch, "spooled")
	w.setSpooled()
}

// drain moves the spool to the sink, oldest first, while the sink accepts. The lock
// is held only to seal and to remove segments, never during network writes: callers
// that overflow into the spool must not wait for a slow sink.
func (w *sinkWriter) drain() {
	w.mu.Lock()
	if w.spool.pending == 0 {
		w.mu.Unlock()
		return
	}
	before := w.spool.pending
	segs, err := w.spool.seal()
	w.mu.Unlock()
	// Counted here, not as before − pending: events may be spooled while this drains.
	delivered := 0
	for _, name := range segs {
		if err == nil {
			var n int
			n, err = drainSegment(w.spool.dir, name, w.policy.MaxEvents, w.send)
			if err == nil {
				w.mu.Lock()
				err = w.spool.drained(name, n)
				w.mu.Unlock()
				delivered += n
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if !w.down {
			w.r.log.Warn("replay sink still failing; events stay spooled", "sink", w.sink.URI, "err", err)
		}
		w.down = true
		w.setSpooledLocked()
		return
	}
	if w.down {
		w.r.log.Info("replay sink is back; spool delivered", "sink", w.sink.URI, "events", before)
	}
	w.down = false
	if w.r.m != nil {
		w.r.m.ReplayEvents.WithLabelValues("spooled", w.label, "delivered").Add(float64(delivered))
	}
	w.setSpooledLocked()
}

// count counts a batch's events by type: one series lookup per run of one type (a
// batch is mostly steps), not one per event.
func (w *sinkWriter) count(batch []item, result string) {
	if w.r.m == nil {
		return
	}
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].typ == batch[i].typ {
			j++
		}
		w.r.m.ReplayEvents.WithLabelValues(batch[i].typ, w.label, result).Add(float64(j - i))
		i = j
	}
}

func (w *sinkWriter) setSpooled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setSpooledLocked()
}

func (w *sinkWriter) setSpooledLocked() {
	if w.r.m != nil {
		w.r.m.ReplaySpooled.WithLabelValues(w.label).Set(float64(w.spool.pending))
	}
}
