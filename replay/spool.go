package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// spool is a sink's local overflow: JSON Lines segments on disk, appended while the
// sink is down or behind, and drained oldest first when it is back. It survives a
// restart: leftover segments are found and drained by the next process.
type spool struct {
	dir     string
	cur     *os.File
	curName string
	curSize int64
	pending int // lines spooled and not yet drained (approximate across crashes)
	seq     int
}

const spoolSegmentBytes = 16 << 20

func openSpool(dir string) (*spool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay spool %s: %w", dir, err)
	}
	s := &spool{dir: dir}
	segs, err := s.segments()
	if err != nil {
		return nil, err
	}
	for _, name := range segs {
		n, _ := countLines(filepath.Join(dir, name))
		s.pending += n
		if seq := segSeq(name); seq >= s.seq {
			s.seq = seq + 1
		}
	}
	return s, nil
}

func segSeq(name string) int {
	var n int
	_, _ = fmt.Sscanf(strings.TrimSuffix(name, ".jsonl"), "%d", &n)
	return n
}

func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte{'\n'}), nil
}

// segments lists the spool's segment files, oldest first.
func (s *spool) segments() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("replay spool %s: %w", s.dir, err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".jsonl") {
			out = append(out, e.Name())
		}
	}
	slices.SortFunc(out, func(a, b string) int { return segSeq(a) - segSeq(b) })
	return out, nil
}

// append writes lines durably (one write, one fsync) or not at all.
func (s *spool) append(lines [][]byte) error {
	if s.cur == nil || s.curSize > spoolSegmentBytes {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	for _, l := range lines {
		buf.Write(l)
		buf.WriteByte('\n')
	}
	n, err := s.cur.Write(buf.Bytes())
	if err == nil {
		err = s.cur.Sync()
	}
	if err != nil {
		_ = s.cur.Truncate(s.curSize) // no half batch: a torn tail would be re-read as garbage
		return fmt.Errorf("replay spool %s: %w", s.curName, err)
	}
	s.curSize += int64(n)
	s.pending += len(lines)
	return nil
}

func (s *spool) rotate() error {
	if s.cur != nil {
		_ = s.cur.Close()
		s.cur = nil
	}
	name := filepath.Join(s.dir, fmt.Sprintf("%010d.jsonl", s.seq))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("replay spool: %w", err)
	}
	s.seq++
	s.cur, s.curName, s.curSize = f, name, 0
	return nil
}

// seal closes the segment being appended (the next append starts a new one) and
// lists every segment, oldest first: those can be drained without the writer's lock,
// since appends only ever go to a newer segment.
func (s *spool) seal() ([]string, error) {
	if s.cur != nil {
		_ = s.cur.Close()
		s.cur = nil
	}
	return s.segments()
}

// drainSegment hands a sealed segment's lines to write in chunks of at most max. A
// segment partly written is sent again whole next time (readers drop duplicates).
func drainSegment(dir, name string, max int, write func(lines [][]byte) error) (int, error) {
	return drainFile(filepath.Join(dir, name), max, write)
}

// drained removes a segment whose n lines all reached the sink.
func (s *spool) drained(name string, n int) error {
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
		return fmt.Errorf("replay spool: %w", err)
	}
	s.pending = max0(s.pending - n)
	return nil
}

func max0(n int) int { return max(n, 0) }

func drainFile(path string, max int, write func([][]byte) error) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("replay spool: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var batch [][]byte
	sent := 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			batch = append(batch, line[:len(line)-1])
		} // a line without newline is a torn tail from a crash: dropped, it was never acknowledged
		if len(batch) >= max || (err != nil && len(batch) > 0) {
			if werr := write(batch); werr != nil {
				return sent, werr
			}
			sent += len(batch)
			batch = nil
		}
		if errors.Is(err, io.EOF) {
			return sent, nil
		}
		if err != nil {
			return sent, fmt.Errorf("replay spool %s: %w", path, err)
		}
	}
}

func (s *spool) close() {
	if s.cur != nil {
		_ = s.cur.Close()
		s.cur = nil
	}
}
