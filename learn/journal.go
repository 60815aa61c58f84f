package learn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/camproxy/camproxy/trainer"
)

// JournalName is the journal's file name in `train playbook`'s --out directory.
const JournalName = "journal.jsonl"

// ErrJournalMismatch is returned by OpenJournal when the journal was written by a run
// with other settings: its answers belong to other conversations.
var ErrJournalMismatch = errors.New("the journal belongs to another run")

// RolloutResult is what POST /v1/rollouts answered for one run of a task.
type RolloutResult struct {
	EpisodeID string  `json:"episode_id,omitempty"`
	Reward    float64 `json:"reward"`
	Success   *bool   `json:"success,omitempty"`
}

// journalRecord is one line of the journal. The first line is the run's header
// ({"key":"run","run":FINGERPRINT}); every other line holds a model reply or a
// rollout result under its key.
type journalRecord struct {
	Key     string         `json:"key"`
	Run     string         `json:"run,omitempty"`
	Reply   *journalReply  `json:"reply,omitempty"`
	Rollout *RolloutResult `json:"rollout,omitempty"`
}

type journalReply struct {
	Text  string        `json:"text,omitempty"`
	Calls []journalCall `json:"calls,omitempty"`
	Usage trainer.Usage `json:"usage"`
}

type journalCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"args"`
}

const headerKey = "run"

// FileJournal is a Journal in a JSON Lines file (and the record of rollout results):
// one record per answer, appended and synced before the answer is used, so that a
// run killed at any point resumes without re-sending a call it had the answer to.
type FileJournal struct {
	mu       sync.Mutex
	f        *os.File
	path     string
	replies  map[string]*trainer.Reply
	rollouts map[string]RolloutResult
	run      string
	torn     int // bytes of a torn last line cut when the journal was opened
}

// ParsedJournal is what a journal file holds.
type ParsedJournal struct {
	Run      string // the header's fingerprint ("" without a header)
	Replies  map[string]*trainer.Reply
	Rollouts map[string]RolloutResult
	Records  int // records read, the header included
	Good     int // bytes up to the end of the last good line; the rest is a torn last line
}

// ParseJournal reads a journal. A last line that does not decode (a write cut short
// by a crash) is left out: Good says where the good part ends. A bad line before the
// last is an error: the file is not a journal, or was damaged. A key recorded twice
// keeps its first answer (the one the run went on with).
func ParseJournal(data []byte) (*ParsedJournal, error) {
	p := &ParsedJournal{Replies: map[string]*trainer.Reply{}, Rollouts: map[string]RolloutResult{}}
	line := 0
	for off := 0; off < len(data); {
		line++
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			return p, nil // a last line never ended: torn, whatever it holds
		}
		raw, next := data[off:off+nl], off+nl+1
		if len(bytes.TrimSpace(raw)) == 0 {
			off, p.Good = next, next
			continue
		}
		rec, err := decodeRecord(raw)
		switch {
		case err != nil:
		case p.Records == 0 && rec.Key != headerKey:
			err = errors.New(`the first record is not the run header {"key":"run",…}`)
		case p.Records > 0 && rec.Key == headerKey:
			err = errors.New("a second run header")
		}
		if err != nil {
			if next >= len(data) {
				return p, nil // the last line: torn
			}
			return nil, fmt.Errorf("journal line %d: %w", line, err)
		}
		p.Records++
		switch {
		case rec.Key == headerKey:
			p.Run = rec.Run
		case rec.Reply != nil:
			if _, dup := p.Replies[rec.Key]; !dup {
				p.Replies[rec.Key] = rec.Reply.reply()
			}
		default:
			if _, dup := p.Rollouts[rec.Key]; !dup {
				p.Rollouts[rec.Key] = *rec.Rollout
			}
		}
		off, p.Good = next, next
	}
	return p, nil
}

func decodeRecord(raw []byte) (journalRecord, error) {
	var rec journalRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, err
	}
	if dec.More() {
		return rec, errors.New("data after the record")
	}
	switch {
	case rec.Key == "":
		return rec, errors.New(`a record needs a "key"`)
	case rec.Key == headerKey && (rec.Run == "" || rec.Reply != nil || rec.Rollout != nil):
		return rec, errors.New(`the run header holds only "run"`)
	case rec.Key != headerKey && (rec.Reply == nil) == (rec.Rollout == nil):
		return rec, errors.New(`a record holds a "reply" or a "rollout"`)
	}
	return rec, nil
}

func (r *journalReply) reply() *trainer.Reply {
	rep := &trainer.Reply{Text: r.Text, Usage: r.Usage}
	for _, c := range r.Calls {
		rep.Calls = append(rep.Calls, trainer.Call{ID: c.ID, Name: c.Name, Args: c.Args})
	}
	return rep
}

// OpenJournal opens (or creates) the journal at path for the run identified by
// fingerprint: a journal of another run is ErrJournalMismatch. A torn last line is
// cut off.
func OpenJournal(path, fingerprint string) (*FileJournal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j, err := openJournal(f, path, fingerprint)
	if err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

func openJournal(f *os.File, path, fingerprint string) (*FileJournal, error) {
	// Two runs appending to one journal would interleave their answers.
	if err := trainer.LockFile(f); err != nil {
		return nil, fmt.Errorf("journal %s is in use by another run (%v)", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	p, err := ParseJournal(data)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if p.Records > 0 && p.Run != fingerprint {
		return nil, fmt.Errorf("journal %s: %w: it was written with other flags, buffer or prompts (run %s, this one %s); rerun with the same flags, or use another --out",
			path, ErrJournalMismatch, p.Run, fingerprint)
	}
	j := &FileJournal{f: f, path: path, replies: p.Replies, rollouts: p.Rollouts, run: fingerprint, torn: len(data) - p.Good}
	if j.torn > 0 {
		if err := f.Truncate(int64(p.Good)); err != nil {
			return nil, fmt.Errorf("journal %s: cut the torn last line: %w", path, err)
		}
	}
	if _, err := f.Seek(int64(p.Good), io.SeekStart); err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if p.Records == 0 {
		if err := j.append(journalRecord{Key: headerKey, Run: fingerprint}); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// Torn is the bytes of a torn last line cut when the journal was opened.
func (j *FileJournal) Torn() int { return j.torn }

// Close closes the file.
func (j *FileJournal) Close() error { return j.f.Close() }

// Lookup implements Journal.
func (j *FileJournal) Lookup(key string) (*trainer.Reply, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	rep, ok := j.replies[key]
	if !ok {
		return nil, false
	}
	c := *rep
	c.Calls = append([]trainer.Call(nil), rep.Calls...)
	return &c, true
}

// Record implements Journal: the reply is on disk when it returns.
func (j *FileJournal) Record(key string, rep *trainer.Reply) error {
	r := &journalReply{Text: rep.Text, Usage: rep.Usage}
	for _, c := range rep.Calls {
		r.Calls = append(r.Calls, journalCall{ID: c.ID, Name: c.Name, Args: c.Args})
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.append(journalRecord{Key: key, Reply: r}); err != nil {
		return err
	}
	j.replies[key] = r.reply()
	return nil
}

// LookupRollout returns a journaled rollout result.
func (j *FileJournal) LookupRollout(key string) (RolloutResult, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.rollouts[key]
	return r, ok
}

// RecordRollout journals a rollout result.
func (j *FileJournal) RecordRollout(key string, r RolloutResult) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.append(journalRecord{Key: key, Rollout: &r}); err != nil {
		return err
	}
	j.rollouts[key] = r
	return nil
}

// append writes one record as one line and syncs it.
func (j *FileJournal) append(rec journalRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	return nil
}
