package augment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Defaults of the file-backed augmenters (rag, playbook).
const (
	// DefaultCheckEvery is how often, at most, Augment looks at the file for a change.
	DefaultCheckEvery = time.Second
	// reloadTimeout bounds one background reload (embedding a large store included).
	reloadTimeout = 5 * time.Minute
)

// retryable marks a load failure worth retrying with the same file, such as an
// embeddings endpoint that was down, as opposed to a file that does not parse.
type retryable struct{ err error }

func (e retryable) Error() string { return e.err.Error() }
func (e retryable) Unwrap() error { return e.err }

// watchedFile reloads a file when it changes. There is no watcher goroutine and
// no fsnotify: poll, called on every Augment, stats the file at most once per
// every, and a change (size, modification time, or a new file renamed over the
// old one) starts one background load. Calls never wait for a load; they keep
// using what is loaded. A load that fails leaves the loaded state as it was.
type watchedFile struct {
	what  string // for logs, e.g. `rag "kb"`
	path  string
	every time.Duration
	log   *slog.Logger
	// load parses data and, on success, installs it. A retryable error means the
	// same file is tried again at the next poll.
	load func(ctx context.Context, data []byte) error

	loadMu sync.Mutex // serialises loads

	mu      sync.Mutex
	checked time.Time   // last poll that looked at the file
	seen    os.FileInfo // the file as of the last load not to be retried
	busy    bool        // a background load runs
	statErr string      // the stat error last logged, so that it is logged once
	closed  bool
	wg      sync.WaitGroup
}

func newWatchedFile(what, path string, every time.Duration, log *slog.Logger, load func(context.Context, []byte) error) *watchedFile {
	if every <= 0 {
		every = DefaultCheckEvery
	}
	return &watchedFile{what: what, path: path, every: every, log: log, load: load, checked: time.Now()}
}

// poll starts a background load if the file changed since the last one. It never
// blocks on a load.
func (w *watchedFile) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.closed || w.busy || now.Sub(w.checked) < w.every {
		return
	}
	w.checked = now
	fi, err := os.Stat(w.path)
	if err != nil {
		if msg := err.Error(); msg != w.statErr {
			w.statErr = msg
			w.log.Warn(w.what+": cannot read the file; keeping the loaded one", "err", err)
		}
		return
	}
	w.statErr = ""
	if w.seen != nil && sameVersion(w.seen, fi) {
		return
	}
	w.busy = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
		defer cancel()
		if err := w.reload(ctx); err != nil {
			w.log.Warn(w.what+": not reloaded; keeping the loaded one", "err", err)
		}
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
	}()
}

// reload reads and loads the file now.
func (w *watchedFile) reload(ctx context.Context) error {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	// Stat before reading: a write in between makes the next poll load again.
	fi, err := os.Stat(w.path)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return err
	}
	err = w.load(ctx, data)
	if !errors.As(err, new(retryable)) {
		w.mu.Lock()
		w.seen = fi
		w.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	return nil
}

// close stops polling and waits for a background load to finish.
func (w *watchedFile) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
}

// sameVersion reports whether b is the same file as a, unchanged.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
