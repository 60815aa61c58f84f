package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/fsx"
)

const (
	// fileDefaultSegmentBytes keeps segments small enough to ship, compact or delete
	// one at a time, and large enough that a busy proxy does not create thousands.
	fileDefaultSegmentBytes = 64 << 20
	// fileMaxLine bounds the memory one corrupt segment (a missing newline in a
	// multi-GB file) can make a reader allocate; real events are at most a few MB.
	fileMaxLine = 64 << 20
	// fileKeepBuf is the largest batch buffer kept between writes: one huge batch
	// must not pin its memory for the life of the process.
	fileKeepBuf = 8 << 20
	// fileSegmentExt is what Scan reads; anything else in the directory is ignored.
	fileSegmentExt = ".jsonl"
)

// FileOptions configure a FileSink.
type FileOptions struct {
	SegmentBytes int64  // rotate when a segment would exceed this; default 64 MiB
	Writer       string // segment name prefix so several processes can share one dir; default "<hostname>-<pid>"
	// Unpartitioned writes segments directly in the directory, not in the time
	// partition of the hour they are written: for imports of history, whose
	// events' times have nothing to do with when they are written (a window read
	// always reads unpartitioned segments).
	Unpartitioned bool
}

// FileSink appends events to JSON Lines segments in a directory. Each batch is one
// write and one fsync, so a batch acknowledged to the recorder survives a crash, and
// a batch that fails is cut off again so no half batch is left for readers.
//
// Segments are named <writer>-<unix nanos of the sink's open>-<seq>.jsonl with fixed
// widths, so name order is time order per writer, and a new sink never appends to an
// old segment: a torn tail from a crash stays at the end of its own segment instead
// of being glued to the next process's first line. A segment lives in the time
// partition dt=YYYY-MM-DD/hr=HH (UTC) of the hour its batches were written in: the
// sink starts a new segment when the hour turns, so a window reads only its hours.
type FileSink struct {
	dir      string
	writer   string
	stamp    int64 // unix nanos at NewFileSink
	segBytes int64
	now      func() time.Time // the clock that picks a batch's partition
	flat     bool             // FileOptions.Unpartitioned

	// writeFile and syncFile are the file operations; tests replace them to
	// simulate a full disk (a short write, a failing fsync).
	writeFile func(f *os.File, b []byte) (int, error)
	syncFile  func(f *os.File) error

	mu     sync.Mutex
	seq    int
	file   *os.File // nil after a failure that left the segment unusable, or before the first open
	path   string
	part   string // the partition of file: partitionPath of the hour it was opened in
	size   int64  // bytes in file that belong to whole, fsynced batches
	buf    []byte
	closed bool
}

// NewFileSink creates dir if needed and opens the sink's first segment, so an
// unwritable directory is reported at start-up rather than at the first event.
func NewFileSink(dir string, o FileOptions) (*FileSink, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay: file sink dir %s: %w", dir, err)
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = fileDefaultSegmentBytes
	}
	if o.Writer == "" {
		o.Writer = fileDefaultWriter()
	}
	f := &FileSink{
		dir:       dir,
		writer:    fileSafeName(o.Writer),
		stamp:     time.Now().UnixNano(),
		segBytes:  o.SegmentBytes,
		now:       time.Now,
		flat:      o.Unpartitioned,
		writeFile: (*os.File).Write,
		syncFile:  (*os.File).Sync,
	}
	if err := f.openSegment(f.partition()); err != nil {
		return nil, err
	}
	return f, nil
}

// fileDefaultWriter names segments after the host and process, unique among the
// processes that share a directory at one time.
func fileDefaultWriter() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "camproxy"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// fileSafeName keeps a writer name inside the directory: a "/" would make the
// segment path point elsewhere.
func fileSafeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == os.PathSeparator || r == 0 {
			return '_'
		}
		return r
	}, s)
}

// Name is the metric label.
func (f *FileSink) Name() string { return "file" }

// Write appends the batch durably, or not at all. It is safe for concurrent use.
func (f *FileSink) Write(ctx context.Context, lines [][]byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replay: file sink %s: %w", f.dir, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("replay: file sink %s: %w", f.dir, os.ErrClosed)
	}
	f.buf = fileAppendBatch(f.buf[:0], lines)
	defer f.releaseBuf()
	if len(f.buf) == 0 {
		return nil
	}
	if err := f.ensureRoom(f.partition(), int64(len(f.buf))); err != nil {
		return err
	}
	return f.appendDurably(f.buf)
}

// fileAppendBatch frames lines as JSON Lines. A raw newline can only be whitespace
// in valid JSON, so it becomes a space rather than splitting one event into two
// garbage lines; empty lines carry nothing and are dropped.
func fileAppendBatch(buf []byte, lines [][]byte) []byte {
	for _, l := range lines {
		if len(l) == 0 {
			continue
		}
		start := len(buf)
		buf = append(buf, l...)
		for i := bytes.IndexByte(buf[start:], '\n'); i >= 0; i = bytes.IndexByte(buf[start:], '\n') {
			buf[start+i] = ' '
			start += i + 1
		}
		buf = append(buf, '\n')
	}
	return buf
}

// partition is where a batch written now goes: its hour's partition, or the
// directory itself for an unpartitioned sink.
func (f *FileSink) partition() string {
	if f.flat {
		return ""
	}
	return partitionPath(f.now())
}

func (f *FileSink) releaseBuf() {
	if cap(f.buf) > fileKeepBuf {
		f.buf = nil
	}
}

// ensureRoom rotates between batches: a batch is never split across segments, so a
// batch larger than SegmentBytes gets a segment of its own; a batch of another hour
// than the segment's starts a segment in its own partition.
func (f *FileSink) ensureRoom(part string, n int64) error {
	if f.file != nil && (f.part != part || f.size > 0 && f.size+n > f.segBytes) {
		f.closeSegment()
	}
	if f.file == nil {
		return f.openSegment(part)
	}
	return nil
}

// appendDurably writes b with one write and one fsync. On failure it cuts the
// segment back to its last whole batch; if even that fails the segment is abandoned
// so the next batch starts a fresh one and is never glued to a torn line.
func (f *FileSink) appendDurably(b []byte) error {
	n, err := f.writeFile(f.file, b)
	if err == nil {
		err = f.syncFile(f.file)
	}
	if err != nil {
		f.rollback()
		return fmt.Errorf("replay: write %s: %w", f.path, err)
	}
	f.size += int64(n)
	return nil
}

// rollback cuts the segment back to its last whole batch. When the handle itself is
// broken it truncates by path and abandons the handle, so the next batch opens a
// fresh segment.
func (f *FileSink) rollback() {
	if err := f.file.Truncate(f.size); err == nil {
		return
	}
	_ = os.Truncate(f.path, f.size)
	f.closeSegment()
}

func (f *FileSink) openSegment(part string) error {
	dir, err := fileMkdirDurable(f.dir, part)
	if err != nil {
		return err
	}
	for range 1000 { // another sink with the same writer name and stamp: take the next seq
		path := filepath.Join(dir, fmt.Sprintf("%s-%020d-%06d%s", f.writer, f.stamp, f.seq, fileSegmentExt))
		f.seq++
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("replay: open segment %s: %w", path, err)
		}
		f.file, f.path, f.size, f.part = file, path, 0, part
		fsx.SyncDir(dir)
		return nil
	}
	return fmt.Errorf("replay: open segment in %s: no free name for writer %q", dir, f.writer)
}

// fileMkdirDurable creates the partition directories below root and fsyncs each
// parent, so that a crash cannot lose a new directory and with it the fsynced
// segments inside. It runs once per segment, so the extra fsyncs are rare.
func fileMkdirDurable(root, part string) (string, error) {
	dir := root
	if part == "" {
		return dir, nil
	}
	for seg := range strings.SplitSeq(part, "/") {
		next := filepath.Join(dir, seg)
		if err := os.Mkdir(next, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("replay: file sink partition %s: %w", next, err)
		}
		fsx.SyncDir(dir) // also when another writer made it: its fsync may not have run yet
		dir = next
	}
	return dir, nil
}

// closeSegment drops the current segment. Every whole batch in it was fsynced
// already, so a close error loses nothing that was acknowledged.
func (f *FileSink) closeSegment() {
	if f.file != nil {
		_ = f.file.Close()
	}
	f.file = nil
}

// Close releases the current segment; later writes fail. It is idempotent.
func (f *FileSink) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.file == nil {
		return nil
	}
	err := f.file.Close()
	f.file = nil
	if err != nil {
		return fmt.Errorf("replay: close %s: %w", f.path, err)
	}
	return nil
}

// FileSource reads back the segments of a directory that one or more FileSinks
// wrote: those in its time partitions (dt=YYYY-MM-DD/hr=HH/) and those directly in
// the directory (written before partitioning). A crash leaves at most a torn last
// line per segment; the source skips it, and any line that is not JSON, instead of
// failing the whole read.
type FileSource struct {
	dir     string
	maxLine int
	skipped atomic.Int64
	read    atomic.Int64
}

// NewFileSource reads dir; nothing is opened until Scan.
func NewFileSource(dir string) *FileSource {
	return &FileSource{dir: dir, maxLine: fileMaxLine}
}

// validLines: deliver passes on only lines gjson.ValidBytes accepts.
func (s *FileSource) validLines() {}

// Skipped is the number of torn, over-long or invalid lines the last Scan skipped.
func (s *FileSource) Skipped() int { return int(s.skipped.Load()) }

// bytesRead is how many bytes of segments the current or last Scan (or ScanWindow)
// has read so far: what a window's read is measured by.
func (s *FileSource) bytesRead() int64 { return s.read.Load() }

// Scan calls fn for every valid line of every segment: the unpartitioned ones first,
// then partition by partition in time order; segments in name order (time order per
// writer), lines in file order. fn's slice is reused after it returns.
func (s *FileSource) Scan(ctx context.Context, fn func(line []byte) error) error {
	return s.scan(ctx, window{}, fn)
}

// ScanWindow is Scan restricted to the partitions whose hour overlaps [from, to),
// plus every unpartitioned segment (nothing says when those were written). A zero
// from or to leaves that side open. A partition is the hour a batch was written, not
// when its events happened: a step that reached the sink late (from the spool after
// an outage) is in a later hour.
func (s *FileSource) ScanWindow(ctx context.Context, from, to time.Time, fn func(line []byte) error) error {
	return s.scan(ctx, window{from, to}, fn)
}

// Size is the bytes of every segment Scan would read, when listed.
func (s *FileSource) Size(ctx context.Context) (int64, error) {
	return s.size(ctx, window{})
}

// SizeWindow is the bytes of the segments ScanWindow would read.
func (s *FileSource) SizeWindow(ctx context.Context, from, to time.Time) (int64, error) {
	return s.size(ctx, window{from, to})
}

func (s *FileSource) size(ctx context.Context, w window) (int64, error) {
	segs, err := fileSegments(ctx, s.dir, w)
	var n int64
	for _, seg := range segs {
		n += seg.size
	}
	return n, err
}

func (s *FileSource) scan(ctx context.Context, w window, fn func(line []byte) error) error {
	s.skipped.Store(0)
	s.read.Store(0)
	segs, err := fileSegments(ctx, s.dir, w)
	if err != nil {
		return err
	}
	var buf []byte
	for _, seg := range segs {
		if buf, err = s.scanSegment(ctx, seg.path, buf, fn); err != nil {
			return err
		}
	}
	return nil
}

// fileSegment is a segment to read and its size when listed.
type fileSegment struct {
	path string
	size int64
}

// fileSegments lists the *.jsonl files directly in dir, then those of the time
// partitions that the window keeps, each directory's files in name order. Other
// directories are not replay data and are passed over.
func fileSegments(ctx context.Context, dir string, w window) ([]fileSegment, error) {
	var out []fileSegment
	if err := fileListPartition(ctx, dir, nil, w, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func fileListPartition(ctx context.Context, dir string, segs []string, w window, out *[]fileSegment) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		if len(segs) > 0 && errors.Is(err, os.ErrNotExist) {
			return nil // removed since its parent was listed
		}
		return fmt.Errorf("replay: read segments in %s: %w", dir, err)
	}
	var subdirs []string
	for _, e := range ents {
		switch {
		case e.IsDir():
			next := append(slices.Clip(segs), e.Name())
			if _, _, ok := parsePartition(next); ok && w.keep(next) {
				subdirs = append(subdirs, e.Name())
			}
		case strings.HasSuffix(e.Name(), fileSegmentExt):
			info, err := e.Info()
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("replay: stat segment in %s: %w", dir, err)
			}
			if info.Mode().IsRegular() {
				*out = append(*out, fileSegment{path: filepath.Join(dir, e.Name()), size: info.Size()})
			}
		}
	}
	for _, name := range subdirs {
		if err := fileListPartition(ctx, filepath.Join(dir, name), append(slices.Clip(segs), name), w, out); err != nil {
			return err
		}
	}
	return nil
}

// scanSegment reads one segment; buf is the line buffer, returned for reuse so a
// multi-MB line does not cost an allocation per segment.
func (s *FileSource) scanSegment(ctx context.Context, path string, buf []byte, fn func([]byte) error) ([]byte, error) {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return buf, nil // removed since the listing (compaction, shipping): nothing to read
	}
	if err != nil {
		return buf, fmt.Errorf("replay: open segment %s: %w", path, err)
	}
	defer file.Close()
	r := bufio.NewReaderSize(countingReader{file, &s.read}, 256<<10)
	for {
		if err := ctx.Err(); err != nil {
			return buf, err
		}
		var tooLong bool
		buf, tooLong, err = fileReadLine(r, buf, s.maxLine)
		if errors.Is(err, io.EOF) {
			if len(buf) > 0 || tooLong { // no trailing newline: a write torn by a crash
				s.skipped.Add(1)
			}
			return buf, nil
		}
		if err != nil {
			return buf, fmt.Errorf("replay: read segment %s: %w", path, err)
		}
		if err := s.deliver(buf[:len(buf)-1], tooLong, fn); err != nil {
			return buf, fmt.Errorf("replay: segment %s: %w", path, err)
		}
	}
}

// deliver hands a whole line to fn unless it must be skipped. Blank lines carry no
// event and are passed over without counting.
func (s *FileSource) deliver(line []byte, tooLong bool, fn func([]byte) error) error {
	switch {
	case tooLong:
		s.skipped.Add(1)
	case len(bytes.TrimSpace(line)) == 0:
	case !gjson.ValidBytes(line):
		s.skipped.Add(1)
	default:
		return fn(line)
	}
	return nil
}

// countingReader adds the bytes read through it to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// fileReadLine reads up to and including the next '\n' into buf[:0]. Past max bytes
// it stops keeping the line (tooLong) but still consumes it, so one corrupt line
// costs bounded memory and the lines after it are still read. At EOF it returns the
// unterminated tail with io.EOF.
func fileReadLine(r *bufio.Reader, buf []byte, max int) (line []byte, tooLong bool, err error) {
	buf = buf[:0]
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(buf)+len(chunk) > max+1 {
			tooLong, buf = true, buf[:0]
		}
		if !tooLong {
			buf = append(buf, chunk...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if tooLong && err == nil {
				buf = append(buf, '\n') // keep the "terminated" shape for the caller
			}
			return buf, tooLong, err
		}
	}
}

// copiesLines: Write copies the batch into its own buffer (lineCopier).
func (f *FileSink) copiesLines() {}
