package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/spf13/pflag"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/when"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
)

// bufferFlags name the replay buffer a command reads, which of its episodes, and how
// the read goes. Reads stream (replay.Episodes): memory stays bounded whatever the
// buffer's size, the rest spills to --spill-dir.
type bufferFlags struct {
	from         string
	since, until string
	arms, tasks  []string
	experiment   string
	late         time.Duration
	workers      int
	spillDir     string
	progress     string

	sel replay.Selection // from the flags, by check
}

func (b *bufferFlags) define(f *pflag.FlagSet) {
	f.StringVar(&b.from, "from", defaultReplayURI, "replay buffer to read: a directory (or file://DIR), redis://HOST:PORT/DB?stream=KEY or s3://BUCKET/PREFIX")
	b.defineSelection(f)
}

// defineSelection defines the flags that choose episodes and tune the read.
func (b *bufferFlags) defineSelection(f *pflag.FlagSet) {
	f.StringVar(&b.since, "since", "", "only episodes started at or after this: 2026-11-24, 2026-11-24T08, RFC 3339, or an age (36h, 7d)")
	f.StringVar(&b.until, "until", "", "only episodes started before this (same forms as --since)")
	f.StringSliceVar(&b.arms, "arm", nil, "only episodes of these arms (repeat the flag or separate with commas)")
	f.StringSliceVar(&b.tasks, "task", nil, "only episodes of these task ids (repeat the flag or separate with commas)")
	f.StringVar(&b.experiment, "experiment", "", "only episodes of this experiment (and those that record none)")
	f.DurationVar(&b.late, "late", replay.DefaultLate, "with --until: how long after it events of a selected episode may still have been written (a late reward)")
	f.IntVar(&b.workers, "workers", 0, "goroutines decoding events (0 = one per CPU)")
	f.StringVar(&b.spillDir, "spill-dir", "", "where a read larger than memory spills (default the system temp dir; removed after)")
	if f.Lookup("progress") == nil { // a command with its own --progress sets b.progress
		cobracli.ChoiceVar(f, &b.progress, "progress", "auto", "progress lines on stderr during a long read (auto: after 2s)", "auto", "off")
	}
}

// check finds a malformed --from or selection before any work starts (a store that
// does not answer shows when it is read).
func (b *bufferFlags) check(p *cobracli.Problems) {
	if b.from != "" {
		b.from = location.URI(b.from)
		if _, err := location.Parse(b.from); err != nil {
			p.Add("--from: %v", err)
		}
	}
	now := time.Now()
	b.sel = replay.Selection{Arms: b.arms, Tasks: b.tasks, Experiment: b.experiment, Late: b.late}
	for _, w := range []struct {
		flag, value string
		dst         *time.Time
	}{{"--since", b.since, &b.sel.Since}, {"--until", b.until, &b.sel.Until}} {
		if w.value == "" {
			continue
		}
		t, err := when.Parse(w.value, now)
		if err != nil {
			p.Add("%s %q: %v", w.flag, w.value, err)
			continue
		}
		*w.dst = t
	}
	if !b.sel.Since.IsZero() && !b.sel.Until.IsZero() && !b.sel.Since.Before(b.sel.Until) {
		p.Add("--since %s is not before --until %s", b.sel.Since.Format(time.RFC3339), b.sel.Until.Format(time.RFC3339))
	}
	if b.late < 0 {
		p.Add("--late %v: want 0 or more", b.late)
	}
	p.AtLeast("--workers", b.workers, 0, "0 (one per CPU) or more")
	p.Dir("--spill-dir", b.spillDir)
}

// scan opens --from and runs read on it with the flags' read options; light leaves
// the episodes' messages out (what aggregates need). A file:// directory that does
// not exist is a mistyped flag (usage), not a run-time failure.
func (b *bufferFlags) scan(ctx context.Context, cmd string, stderr io.Writer, light bool, read func(replay.Source, replay.ReadOptions) (replay.Summary, error)) (replay.Summary, error) {
	src, err := replay.OpenSource(ctx, b.from)
	if err != nil {
		return replay.Summary{}, uriError(cmd, "--from", b.from, err)
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	o := replay.ReadOptions{Select: b.sel, SpillDir: b.spillDir, Workers: b.workers, Light: light}
	if b.progress != "off" {
		o.Progress = replay.ProgressLines(stderr, cmd, 2*time.Second)
	}
	sum, err := read(src, o)
	if errors.Is(err, fs.ErrNotExist) {
		return sum, cobracli.Usagef("%s: --from %s: no replay buffer there: record some traffic (camproxy serve) or import trajectories (camproxy replay import) first", cmd, location.Redact(b.from))
	}
	if err != nil {
		var ue *cobracli.UsageError
		if ctx.Err() != nil || errors.As(err, &ue) {
			return sum, err
		}
		return sum, fmt.Errorf("%s: --from %s: %w", cmd, location.Redact(b.from), err)
	}
	// Torn or over-long lines a source drops never reach the reader; count them too.
	if s, ok := src.(interface{ Skipped() int }); ok {
		sum.Skipped += s.Skipped()
	}
	return sum, nil
}

// each streams the selected episodes of --from to fn.
func (b *bufferFlags) each(ctx context.Context, cmd string, stderr io.Writer, light bool, fn func(*replay.Episode) error) (replay.Summary, error) {
	return b.scan(ctx, cmd, stderr, light, func(src replay.Source, o replay.ReadOptions) (replay.Summary, error) {
		return replay.Episodes(ctx, src, o, fn)
	})
}

// read collects the selected episodes of --from into a Buffer, in Buffer order.
func (b *bufferFlags) read(ctx context.Context, cmd string, stderr io.Writer) (*replay.Buffer, error) {
	var buf *replay.Buffer
	sum, err := b.scan(ctx, cmd, stderr, false, func(src replay.Source, o replay.ReadOptions) (sum replay.Summary, err error) {
		buf, sum, err = replay.Collect(ctx, src, o)
		return sum, err
	})
	if err != nil {
		return nil, err
	}
	buf.Skipped = sum.Skipped // with the lines the source itself dropped
	return buf, nil
}
