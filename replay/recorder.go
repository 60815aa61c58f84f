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
// and never fails. A dispatcher encodes events and fans them out to one writer per
// sink; a writer batches, and when its sink is down or behind it spools to disk and
// drains the spool when the sink is back. Nothing accepted is dropped unless the spool
// itself cannot be written, which is logged as an error and counted.
type Recorder struct {
	log       *slog.Logger
	m         *metrics.Metrics
	keepMedia bool
	q         chan item
	writers   []*sinkWriter

	mu     sync.RWMutex
	closed bool
	done   chan struct{}
}

type item struct {
	ev   any // *EpisodeEvent, *StepEvent or *RewardEvent
	line []byte
	typ  string
}

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
	r := &Recorder{log: o.Logger, m: o.Metrics, keepMedia: o.KeepMedia, q: make(chan item, o.Queue), done: make(chan struct{})}
	for _, s := range sinks {
		sp, err := openSpool(filepath.Join(o.SpoolDir, spoolName(s)))
		if err != nil {
			return nil, err
		}
		policy := BatchPolicy{MaxEvents: 256, MaxWait: 50 * time.Millisecond}
		if bp, ok := s.Sink.(interface{ BatchPolicy() BatchPolicy }); ok {
			policy = bp.BatchPolicy()
		}
		w := &sinkWriter{r: r, sink: s, spool: sp, policy: policy, in: make(chan item, o.Queue),
			retry: o.RetryEvery, timeout: o.WriteTimeout, label: s.Name()}
		w.setSpooled()
		r.writers = append(r.writers, w)
	}
	var wg sync.WaitGroup
	for _, w := range r.writers {
		wg.Go(w.run)
	}
	go func() {
		r.dispatch()
		for _, w := range r.writers {
			close(w.in)
		}
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
func (r *Recorder) Add(ev any) {
	typ := eventType(ev)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.log.Error("replay event after shutdown; spooling it", "type", typ)
		r.overflow(item{ev: ev, typ: typ})
		return
	}
	select {
	case r.q <- item{ev: ev, typ: typ}:
		if r.m != nil {
			r.m.ReplayQueue.Inc()
		}
	default:
		r.overflow(item{ev: ev, typ: typ})
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
	line, err := r.encode(it.ev)
	if err != nil {
		r.log.Error("replay event cannot be encoded", "type", it.typ, "err", err)
		return
	}
	it.line = line
	for _, w := range r.writers {
		w.spoolBatch([]item{it})
	}
}

func (r *Recorder) dispatch() {
	// A sink that is behind gets its events on disk rather than block the others.
	// They are spooled in batches (one write and fsync each), not one by one: a sink
	// that fell behind for the length of one slow fsync must not slow the dispatcher
	// to one fsync per event. Once a sink has events waiting here, its later events
	// wait behind them, so that its order is kept.
	spill := make([][]item, len(r.writers))
	flush := func() {
		for i, w := range r.writers {
			if len(spill[i]) > 0 {
				w.spoolBatch(spill[i])
				spill[i] = nil
			}
		}
	}
	for it := range r.q {
		if r.m != nil {
			r.m.ReplayQueue.Dec()
		}
		line, err := r.encode(it.ev)
		if err != nil {
			r.log.Error("replay event cannot be encoded", "type", it.typ, "err", err)
			continue
		}
		it.line, it.ev = line, nil
		for i, w := range r.writers {
			if len(spill[i]) == 0 {
				select {
				case w.in <- it:
					continue
				default:
				}
			}
			spill[i] = append(spill[i], it)
			if len(spill[i]) >= spillBatch {
				w.spoolBatch(spill[i])
				spill[i] = nil
			}
		}
		if len(r.q) == 0 {
			flush()
		}
	}
	flush()
}

// encode is an event's line. Media bytes are dropped here, on the recorder's
// goroutine, so that hashing them never costs the request path; the event is the
// recorder's once added, and the messages it shares with the request are not touched.
func (r *Recorder) encode(ev any) ([]byte, error) {
	if s, ok := ev.(*StepEvent); ok && !r.keepMedia {
		s.Messages = protocol.StripMedia(s.Messages)
		if s.Response != nil && protocol.HoldsMedia(s.Response) {
			resp := protocol.StripMessageMedia(*s.Response)
			s.Response = &resp
		}
	}
	if s, ok := ev.(*StepEvent); ok {
		return appendStep(make([]byte, 0, stepSize(s)), s), nil
	}
	return json.Marshal(ev)
}

// spillBatch is how many events a sink that is behind has spooled at once.
const spillBatch = 256

// Close stops accepting, flushes every queued event to its sink (or its spool) and
// waits until that is done or ctx ends.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.q)
	}
	r.mu.Unlock()
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
	b := Backlog{Queue: len(r.q), Spooled: make(map[string]int, len(r.writers))}
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
	in      chan item
	retry   time.Duration
	timeout time.Duration

	mu    sync.Mutex // guards spool: the writer and overflowing callers share it
	spool *spool
	down  bool
}

func (w *sinkWriter) run() {
	var batch []item
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	retry := time.NewTicker(w.retry)
	defer retry.Stop()
	w.drain() // leftovers of an earlier process
	for {
		select {
		case it, ok := <-w.in:
			if !ok { // shutting down
				w.finish(batch)
				return
			}
			if len(batch) == 0 {
				flush.Reset(w.policy.MaxWait)
			}
			batch = append(batch, it)
			if len(batch) >= w.policy.MaxEvents {
				flush.Stop()
				// Group commit: the events that queued up during the last write go
				// into this one, so one write and fsync cover them and a sink that
				// fell behind catches up instead of spilling into the spool.
				var closed bool
				batch, closed = w.takeQueued(batch)
				if closed {
					w.finish(batch)
					return
				}
				w.write(batch)
				batch = nil
			}
		case <-flush.C:
			w.write(batch)
			batch = nil
		case <-retry.C:
			w.drain()
		}
	}
}

// maxGroup bounds a group-committed batch: events, or the sink's own batch size if larger.
const maxGroup = 4096

// takeQueued appends to batch the events already waiting, without blocking; closed
// reports that the recorder is shutting down.
func (w *sinkWriter) takeQueued(batch []item) ([]item, bool) {
	for len(batch) < max(maxGroup, w.policy.MaxEvents) {
		select {
		case it, ok := <-w.in:
			if !ok {
				return batch, true
			}
			batch = append(batch, it)
		default:
			return batch, false
		}
	}
	return batch, false
}

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

// write sends a batch, or spools it when the sink fails or still has a backlog (so
// the backlog goes first).
func (w *sinkWriter) write(batch []item) {
	if len(batch) == 0 {
		return
	}
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
	w.mu.Lock()
	err := w.spool.append(lines(batch))
	w.mu.Unlock()
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
