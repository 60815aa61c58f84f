package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"
)

// DefaultReadMemory is what a streaming read may hold in memory by default: events
// beyond it spill to disk.
const DefaultReadMemory = 256 << 20

// ReadOptions configure a streaming read (Episodes, StatsOf).
type ReadOptions struct {
	Select Selection
	// SpillDir is where the read's private spill directory is made; "" is
	// os.TempDir(). The directory is removed when the read returns, also on error
	// or cancellation.
	SpillDir string
	// MemoryBytes bounds the events held in memory (Pebble's memtables and block
	// cache); beyond it they spill to SpillDir. 0 means DefaultReadMemory. The lines
	// in flight (about 3 × Workers × 256 KiB) and the largest single episode come on
	// top.
	MemoryBytes int64
	// Workers decode lines in parallel; 0 means GOMAXPROCS. Reassembly still sees
	// events in scan order.
	Workers int
	// Light leaves every episode's Messages, Task text and Context out: what
	// aggregates (stats, report) need. They are dropped at decoding and never
	// spilled.
	Light bool
	// Progress, when set, is called a few times a second and once at the end.
	Progress func(Progress)

	now func() time.Time // tests: the progress clock
}

// Summary is what a streaming read saw besides the episodes it delivered.
type Summary struct {
	Skipped    int // lines that did not decode
	Duplicates int // events dropped as repeats of an id already read
	Orphans    int // episodes known only from rewards
	// Partial counts, in a windowed read (a WindowSource with Since or Until set),
	// episodes whose episode event lies outside the window: their start is unknown,
	// and their trajectory likely cut, so they are left out.
	Partial    int
	Unselected int           // whole episodes the Selection left out
	Episodes   int           // delivered to fn
	Learn      []*LearnEvent // the learner's decisions read, by At (ties: scan order)
	Events     int64         // lines scanned
	Bytes      int64         // bytes scanned, newlines included
	Spilled    int64         // bytes the read wrote to its spill directory
}

// Episodes streams every selected, reassembled episode to fn, holding in memory
// only MemoryBytes of events (the rest spill to disk) and one episode at a time.
// Reassembly is Read's: duplicates by event id (the first read wins), the latest
// reward by At, steps by turn then time then scan order, orphans counted.
//
// Episodes arrive grouped by id: in order of id length, then id, NOT by StartedAt;
// to get Buffer order collect them and SortEpisodes. fn may keep the episode. An
// error from fn stops the read and is returned as is.
func Episodes(ctx context.Context, src Source, o ReadOptions, fn func(*Episode) error) (Summary, error) {
	if err := o.Select.Validate(); err != nil {
		return Summary{}, err
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultReadMemory
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	var total int64
	if o.Progress != nil {
		total = sizeOf(ctx, src, o.Select)
	}
	sp, err := openSpill(o.SpillDir, o.MemoryBytes)
	if err != nil {
		return Summary{}, err
	}
	r := &streamRead{o: o, sp: sp, prog: newProgress(o.Progress, o.now, total)}
	err = r.run(ctx, src, fn)
	r.sum.Spilled = sp.spilled()
	if cerr := sp.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return r.sum, err
	}
	r.prog.done()
	return r.sum, nil
}

// sizeOf is what a read of src will scan, or 0 when src cannot tell: an ETA is a
// nicety, so an error only costs the ETA.
func sizeOf(ctx context.Context, src Source, sel Selection) int64 {
	var n int64
	if _, ok := src.(WindowSource); ok && sel.windowed() {
		if ws, ok := src.(WindowSizer); ok {
			from, to := sel.window()
			n, _ = ws.SizeWindow(ctx, from, to)
		}
		return n
	}
	if sz, ok := src.(Sizer); ok {
		n, _ = sz.Size(ctx)
	}
	return n
}

type streamRead struct {
	o    ReadOptions
	sp   *spill
	sum  Summary
	prog *progress
	key  []byte
	seq  uint64
	// partial: the source read only the selection's time partitions.
	partial bool
}

func (r *streamRead) run(ctx context.Context, src Source, fn func(*Episode) error) error {
	if err := r.load(ctx, src); err != nil {
		return err
	}
	if err := r.dedup(); err != nil {
		return err
	}
	if err := r.learn(); err != nil {
		return err
	}
	return r.deliver(ctx, fn)
}

// streamChunk is a run of scanned lines decoded by one worker.
type streamChunk struct {
	data []byte
	ends []int
	out  []streamEvent
	done chan struct{}
}

// streamEvent is what the spill needs of one line.
type streamEvent struct {
	skip  bool
	learn bool
	ep    string
	id    string
	val   []byte
}

const (
	streamChunkBytes = 256 << 10
	streamChunkLines = 2048
)

// load scans src into the spill: the source's goroutine copies lines into chunks,
// Workers decode chunks, and one goroutine takes the decoded chunks in scan order.
func (r *streamRead) load(ctx context.Context, src Source) error {
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan *streamChunk, r.o.Workers)
	order := make(chan *streamChunk, 2*r.o.Workers)
	_, valid := src.(validLines)
	for range r.o.Workers {
		g.Go(func() error {
			for c := range jobs {
				c.decode(r.o.Light, valid)
				close(c.done)
			}
			return nil
		})
	}
	g.Go(func() error {
		for c := range order {
			select {
			case <-c.done:
			case <-gctx.Done():
				return gctx.Err()
			}
			if err := r.take(c); err != nil {
				return err
			}
		}
		return r.sp.apply()
	})

	cur := &streamChunk{}
	send := func() error {
		c := cur
		cur = &streamChunk{}
		c.done = make(chan struct{})
		for _, ch := range []chan *streamChunk{jobs, order} {
			select {
			case ch <- c:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	}
	scan := func(line []byte) error {
		cur.data = append(cur.data, line...)
		cur.ends = append(cur.ends, len(cur.data))
		if len(cur.data) >= streamChunkBytes || len(cur.ends) >= streamChunkLines {
			return send()
		}
		return nil
	}
	var err error
	if ws, ok := src.(WindowSource); ok && r.o.Select.windowed() {
		from, to := r.o.Select.window()
		r.partial = true
		err = ws.ScanWindow(gctx, from, to, scan)
	} else {
		err = src.Scan(gctx, scan)
	}
	if err == nil && len(cur.ends) > 0 {
		err = send()
	}
	close(jobs)
	close(order)
	if werr := g.Wait(); werr != nil {
		return werr
	}
	if err == nil {
		err = ctx.Err() // a Source that returned nil on cancellation
	}
	return err
}

// validLines is a Source whose Scan and ScanWindow hand fn only lines that
// gjson.ValidBytes accepts (it skips the others), so a reader need not check again.
type validLines interface{ validLines() }

// decode turns each line of c into what the spill keeps; valid: the source
// validated the lines (validLines).
func (c *streamChunk) decode(light, valid bool) {
	c.out = make([]streamEvent, len(c.ends))
	step := lightStep
	if valid {
		step = lightStepValid
	}
	start := 0
	for i, end := range c.ends {
		line := c.data[start:end:end]
		start = end
		// Most lines are steps, and lightStep reads one (proving Decode would) at a
		// quarter of Decode's cost: a full read spills the line, marked as proven,
		// and decodes it once, when it delivers (fullStep).
		if s, id, ep, ok := step(line); ok {
			c.out[i] = streamEvent{id: id, ep: ep}
			if light {
				c.out[i].val = appendLightStep(nil, s)
			} else {
				c.out[i].val = append(append(make([]byte, 0, 1+len(line)), fullStepTag), line...)
			}
			continue
		}
		ev, err := Decode(line)
		if err != nil {
			c.out[i].skip = true
			continue
		}
		e := &c.out[i]
		e.id, e.ep, e.val = readEventID(ev), readEpisodeID(ev), line
		switch ev := ev.(type) {
		case *LearnEvent:
			e.learn = true
		case *StepEvent:
			if light {
				e.val = appendLightStep(nil, stepOf(ev))
			}
		case *EpisodeEvent:
			if light && (ev.Task != "" || ev.Context != "") {
				ev.Task, ev.Context = "", ""
				if b, err := json.Marshal(ev); err == nil {
					e.val = b
				}
			}
		}
	}
}

// lightStepTag starts a light step's spilled form, fullStepTag a step line that
// lightStep accepted; an event line starts with '{'.
const (
	lightStepTag = 0x01
	fullStepTag  = 0x02
)

// appendLightStep encodes what aggregates need of a step (no messages) in ~40
// bytes instead of its line: a light read spills a twentieth of the data.
func appendLightStep(dst []byte, s readStep) []byte {
	at, _ := s.at.MarshalText() // a time that came from JSON text goes back to it
	dst = append(dst, lightStepTag)
	dst = binary.AppendUvarint(dst, uint64(len(at)))
	dst = append(dst, at...)
	dst = binary.AppendVarint(dst, int64(s.turn))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.augment))
	ok := byte(0)
	if s.ok {
		ok = 1
	}
	dst = append(dst, ok)
	dst = binary.AppendVarint(dst, s.usage.InputTokens)
	return binary.AppendVarint(dst, s.usage.OutputTokens)
}

func decodeLightStep(v []byte) (readStep, error) {
	var s readStep
	bad := fmt.Errorf("replay: spill holds a step it cannot decode")
	v = v[1:]
	n, k := binary.Uvarint(v)
	if k <= 0 || uint64(len(v)-k) < n {
		return s, bad
	}
	if err := s.at.UnmarshalText(v[k : k+int(n)]); err != nil {
		return s, bad
	}
	v = v[k+int(n):]
	turn, k := binary.Varint(v)
	if k <= 0 || len(v)-k < 9 {
		return s, bad
	}
	s.turn = int(turn)
	v = v[k:]
	s.augment = math.Float64frombits(binary.LittleEndian.Uint64(v))
	s.ok = v[8] == 1
	v = v[9:]
	if s.usage.InputTokens, k = binary.Varint(v); k <= 0 {
		return s, bad
	}
	if s.usage.OutputTokens, k = binary.Varint(v[k:]); k <= 0 {
		return s, bad
	}
	return s, nil
}

// take writes a decoded chunk to the spill, seq numbers continuing in scan order.
func (r *streamRead) take(c *streamChunk) error {
	start := 0
	for i := range c.out {
		e := &c.out[i]
		r.sum.Events++
		r.sum.Bytes += int64(c.ends[i]-start) + 1
		start = c.ends[i]
		seq := r.seq
		r.seq++
		if e.skip {
			r.sum.Skipped++
			continue
		}
		var k []byte
		if e.learn {
			k = spillKey(r.key[:0], spillLearn, "", seq)
		} else {
			k = spillKey(r.key[:0], spillEpisode, e.ep, seq)
		}
		r.key = k
		if err := r.sp.set(k, e.val); err != nil {
			return err
		}
		if e.id != "" {
			ik := spillKey(nil, spillID, e.id, seq)
			if err := r.sp.set(ik, k); err != nil {
				return err
			}
		}
	}
	r.prog.p.Events, r.prog.p.Bytes = r.sum.Events, r.sum.Bytes
	r.prog.tick()
	return nil
}

// dedup deletes every event whose id was read before: within an id's keys the
// first is the first read.
func (r *streamRead) dedup() error {
	var prev []byte
	err := r.sp.scan(spillID, func(k, v []byte) error {
		id := spillGroup(k)
		if prev != nil && bytes.Equal(id, prev) {
			r.sum.Duplicates++
			return r.sp.delete(v)
		}
		prev = append(prev[:0], id...)
		return nil
	})
	if err != nil {
		return err
	}
	return r.sp.apply()
}

func (r *streamRead) learn() error {
	err := r.sp.scan(spillLearn, func(_, v []byte) error {
		ev, err := Decode(v)
		if err != nil {
			return fmt.Errorf("replay: spill holds an event it cannot decode: %w", err)
		}
		r.sum.Learn = append(r.sum.Learn, ev.(*LearnEvent))
		return nil
	})
	sortLearn(r.sum.Learn)
	return err
}

// deliver reassembles the episodes from the spill, one group of keys at a time.
func (r *streamRead) deliver(ctx context.Context, fn func(*Episode) error) error {
	var group []byte
	var cur *readEpisode
	finish := func() error {
		if cur == nil {
			return nil
		}
		e := cur
		cur = nil
		return r.finish(e, fn)
	}
	n := 0
	err := r.sp.scan(spillEpisode, func(k, v []byte) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if g := spillGroup(k); cur == nil || !bytes.Equal(g, group) {
			if err := finish(); err != nil {
				return err
			}
			group = append(group[:0], g...)
			cur = &readEpisode{ep: &Episode{ID: spillName(k)}}
		}
		if len(v) > 0 && v[0] == lightStepTag {
			s, err := decodeLightStep(v)
			cur.steps = append(cur.steps, s)
			return err
		}
		if len(v) > 0 && v[0] == fullStepTag {
			if s, ok := fullStep(v[1:]); ok {
				cur.steps = append(cur.steps, s)
				return nil
			}
			v = v[1:] // not expected: lightStep proved it; Decode decides
		}
		ev, err := Decode(v)
		if err != nil {
			return fmt.Errorf("replay: spill holds an event it cannot decode: %w", err)
		}
		cur.add(ev)
		return nil
	})
	if err != nil {
		return err
	}
	return finish()
}

func (r *streamRead) finish(e *readEpisode, fn func(*Episode) error) error {
	switch {
	case e.orphan():
		r.sum.Orphans++
		return nil
	case r.partial && !e.opened:
		r.sum.Partial++
		return nil
	}
	ep := e.assemble()
	if r.o.Light {
		ep.Messages = nil // assemble makes an empty one
	}
	if !r.o.Select.Selects(ep) {
		r.sum.Unselected++
		return nil
	}
	r.sum.Episodes++
	r.prog.p.Episodes++
	r.prog.tick()
	return fn(ep)
}

// Collect reads the selected episodes of src into a Buffer, in Buffer order
// (SortEpisodes), with the read's counts on it and in the Summary.
func Collect(ctx context.Context, src Source, o ReadOptions) (*Buffer, Summary, error) {
	buf := &Buffer{}
	sum, err := Episodes(ctx, src, o, func(ep *Episode) error {
		buf.Episodes = append(buf.Episodes, ep)
		return nil
	})
	if err != nil {
		return nil, sum, err
	}
	SortEpisodes(buf.Episodes)
	buf.Skipped, buf.Duplicates, buf.Orphans, buf.Learn = sum.Skipped, sum.Duplicates, sum.Orphans, sum.Learn
	return buf, sum, nil
}
