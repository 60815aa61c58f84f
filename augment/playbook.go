package augment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/camproxy/camproxy/playbook"
)

// PlaybookOptions configures a playbook augmenter (mapped from config.Augmenter).
type PlaybookOptions struct {
	Name       string // augmenter name, used in errors and logs
	File       string // ACE text or RCL JSON
	TopN       int    // > 0: only the N bullets with the highest helpful - harmful; 0 = all
	CheckEvery time.Duration
	Logger     *slog.Logger // nil = no logs
}

// Playbook serves the ACE / RCL baselines: one playbook, rendered as the same
// context for every task. The file is reloaded when it changes.
//
// The file is ACE's text or RCL's JSON (package playbook reads both); the context
// is playbook.Playbook.Context: the sections in file order, each as "## NAME"
// followed by its entries as "- content". top_n ranks by RCL's helpful_count −
// harmful_count (ACE's helpful=/harmful= counters).
type Playbook struct {
	o     PlaybookOptions
	log   *slog.Logger
	cur   atomic.Pointer[renderedPlaybook]
	watch *watchedFile
}

type renderedPlaybook struct {
	text    string
	version string
	bullets int // bullets in the file (rendered or not)
}

// NewPlaybook loads and renders the playbook; a file that cannot be read or
// parsed is an error.
func NewPlaybook(o PlaybookOptions) (*Playbook, error) {
	if o.File == "" {
		return nil, fmt.Errorf("augment: playbook %q: file is empty", o.Name)
	}
	if o.TopN < 0 {
		return nil, fmt.Errorf("augment: playbook %q: top_n must be >= 0, got %d", o.Name, o.TopN)
	}
	p := &Playbook{o: o, log: o.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	what := fmt.Sprintf("augment: playbook %q", o.Name)
	p.watch = newWatchedFile(what, o.File, o.CheckEvery, p.log, p.load)
	if err := p.watch.reload(context.Background()); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return p, nil
}

// Augment returns the rendered playbook, the same for every task; an empty
// playbook is ErrEmpty.
func (p *Playbook) Augment(context.Context, Request) (string, error) {
	p.watch.poll()
	cur := p.cur.Load()
	if cur.text == "" {
		return "", fmt.Errorf("augment: playbook %q: %w", p.o.Name, ErrEmpty)
	}
	return cur.text, nil
}

// Version is a short hash of the rendered playbook.
// It also looks at the file (at most once a second): the cache key carries the
// version, so an edited playbook must change it even while every task is a cache hit.
func (p *Playbook) Version() string {
	p.watch.poll()
	return p.cur.Load().version
}

// Text is the rendered playbook ("" when it has no bullets).
func (p *Playbook) Text() string { return p.cur.Load().text }

// Reload loads the file now, whether or not it changed. On error the loaded
// playbook keeps serving.
func (p *Playbook) Reload(ctx context.Context) error { return p.watch.reload(ctx) }

// Close stops reloading and waits for a reload in progress.
func (p *Playbook) Close() error {
	p.watch.close()
	return nil
}

func (p *Playbook) load(_ context.Context, data []byte) error {
	pb, err := playbook.Parse(data)
	if err != nil {
		return err
	}
	text := pb.Context(p.o.TopN)
	sum := sha256.Sum256([]byte(text))
	r := &renderedPlaybook{text: text, version: hex.EncodeToString(sum[:6]), bullets: len(pb.Entries)}
	p.cur.Store(r)
	p.log.Info("augment: playbook loaded", "augmenter", p.o.Name, "file", p.o.File, "sections", len(pb.Sections()),
		"bullets", r.bullets, "version", r.version)
	return nil
}

// clip shortens s to at most n runes for a message.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
