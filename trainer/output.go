package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// Record is one line of the output: the guidance a reflection wrote for a task, and
// where it came from.
type Record struct {
	TaskID          string    `json:"task_id"`
	TaskDescription string    `json:"task_description"`
	Guidance        string    `json:"guidance"`
	SourceEpisodes  []string  `json:"source_episodes"` // in run order: run_1.md is the first
	Rewards         []float64 `json:"rewards"`         // aligned with SourceEpisodes
	Model           string    `json:"model"`           // as --model gave it: openai/NAME, bedrock/MODEL_ID
	PromptVersion   string    `json:"prompt_version"`
	Tokens          Usage     `json:"tokens"` // summed over the job's model calls
}

// Key is the job key of the record (see JobKey).
func (r *Record) Key() string { return JobKey(r.TaskID, r.SourceEpisodes) }

// outputScan is what an existing output file holds.
type outputScan struct {
	done  map[string]bool
	lines int   // whole records
	bad   int   // whole lines that are not records
	good  int64 // bytes up to the end of the last whole line
	torn  int64 // bytes after it: a line cut short by a kill
}

// scanOutput reads an output file's records; a missing file is empty.
func scanOutput(r io.Reader) (*outputScan, error) {
	s := &outputScan{done: map[string]bool{}}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			s.good += int64(len(line))
			if t := bytes.TrimSpace(line); len(t) > 0 {
				var rec Record
				if json.Unmarshal(t, &rec) != nil || rec.TaskID == "" && len(rec.SourceEpisodes) == 0 {
					s.bad++
				} else {
					s.done[rec.Key()] = true
					s.lines++
				}
			}
		} else {
			s.torn += int64(len(line))
		}
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// DoneKeys returns the job keys already in an output file (none if it does not
// exist), without changing it: what --dry-run shows.
func DoneKeys(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := scanOutput(f)
	if err != nil {
		return nil, err
	}
	return s.done, nil
}

// outFile appends records: one write and one fsync per line, under an exclusive lock
// on the file so that two runs never interleave.
type outFile struct {
	mu   sync.Mutex
	f    *os.File
	size int64
}

// openOutput opens (or creates) the output for appending, takes its lock, and
// repairs a torn last line left by a killed run: it is cut off, so that the next
// record starts on a line of its own. It returns what the file held.
func openOutput(path string) (*outFile, *outputScan, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("in use by another run (%w)", err)
	}
	s, err := scanOutput(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	if s.torn > 0 {
		if err := f.Truncate(s.good); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("cut the torn last line: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("sync: %w", err)
		}
	}
	return &outFile{f: f, size: s.good}, s, nil
}

// Append writes one record as one line. A failed write is cut off again, so that
// the file never holds a torn line while this run goes on.
func (o *outFile) Append(r *Record) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil { // Encode ends the line with '\n'
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.f.Write(buf.Bytes()) // O_APPEND: one write, at the end
	if err == nil {
		err = o.f.Sync()
	}
	if err != nil {
		_ = o.f.Truncate(o.size)
		return fmt.Errorf("append to %s: %w", o.f.Name(), err)
	}
	o.size += int64(buf.Len())
	return nil
}

func (o *outFile) Close() error { return o.f.Close() } // closing releases the lock
