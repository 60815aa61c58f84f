package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/replay"
)

// RecordResult is the replay recorder's rate into the file sink: paced at a fixed
// rate (sustained: every event must reach the sink, none the spool), then as fast as
// the queue takes them (the ceiling).
type RecordResult struct {
	PacedRate      float64 `json:"paced_rate"`
	PacedWritten   int     `json:"paced_written"`
	PacedSpooled   int     `json:"paced_spooled"` // took the spool (a sink write stalled longer than the queue lasts)
	PacedFromSpool int     `json:"paced_delivered_from_spool"`
	PacedLagMs     float64 `json:"paced_flush_ms"` // after the last Add, until every event was on disk

	Steps       int     `json:"steps"`
	Written     int     `json:"written"`
	Spooled     int     `json:"spooled"`
	Seconds     float64 `json:"seconds"`
	StepsPerSec float64 `json:"steps_per_sec"`
	AvgBytes    int     `json:"avg_event_bytes"`
}

// recordSteps feeds n real step events (the new messages of tau-bench turns and their
// answers) to a recorder with the file sink, as fast as the queue takes them without
// overflowing to the spool, and times until every one is fsynced.
func recordSteps(convs []*conv, n int, pacedRate float64, pacedFor time.Duration) (*RecordResult, error) {
	dir, err := os.MkdirTemp("", "camproxy-record-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var steps []replay.StepEvent
	size := 0
	for _, c := range convs {
		prev := 1
		for t, at := range c.turns {
			body := c.body(nil, t, 1, false)
			req, err := openai.Parse(body, protocol.DefaultTaskRules())
			if err != nil {
				return nil, err
			}
			ans, usage, err := openai.DecodeResponse(c.replyJSON[t])
			if err != nil {
				return nil, err
			}
			msgs := req.Messages[min(prev, len(req.Messages)):]
			prev = at + 1
			steps = append(steps, replay.StepEvent{V: replay.Version, Type: replay.TypeStep, EpisodeID: "ep_bench", Turn: t,
				Messages: msgs, Response: &ans, Usage: usage, Timing: replay.Timing{Augment: 0.01, UpstreamTTFB: 1.2, Total: 1.5},
				Status: 200, At: time.Now().UTC()})
			for _, m := range msgs {
				size += len(m.Content) + 40
			}
			size += len(ans.Content) + 200
		}
	}
	res := &RecordResult{PacedRate: pacedRate}
	// Paced: pacedRate steps a second for pacedFor, open loop.
	{
		rec, m, done, err := newRecorder(dir + "/paced")
		if err != nil {
			return nil, err
		}
		total := int(pacedRate * pacedFor.Seconds())
		start := time.Now()
		for i := range total {
			if d := time.Until(start.Add(time.Duration(float64(i) / pacedRate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
			ev := steps[i%len(steps)]
			ev.ID = replay.NewEventID()
			rec.Add(&ev)
		}
		last := time.Now()
		if err := rec.Close(context.Background()); err != nil {
			return nil, err
		}
		done()
		res.PacedLagMs = float64(time.Since(last).Microseconds()) / 1000
		res.PacedWritten = int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "written")))
		res.PacedSpooled = int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "spooled")))
		res.PacedFromSpool = int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues("spooled", "file", "delivered")))
	}
	rec, m, done, err := newRecorder(dir + "/max")
	if err != nil {
		return nil, err
	}
	const queue = 10000
	start := time.Now()
	for i := range n {
		if i%128 == 0 {
			for testutil.ToFloat64(m.ReplayQueue) > queue*8/10 {
				runtime.Gosched()
				time.Sleep(100 * time.Microsecond)
			}
		}
		ev := steps[i%len(steps)]
		ev.ID = replay.NewEventID()
		rec.Add(&ev)
	}
	if err := rec.Close(context.Background()); err != nil {
		return nil, err
	}
	done()
	el := time.Since(start)
	written := int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "written")))
	spooled := int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "spooled")))
	res.Steps, res.Written, res.Spooled, res.Seconds = n, written, spooled, el.Seconds()
	res.StepsPerSec, res.AvgBytes = float64(written+spooled)/el.Seconds(), size/max(1, len(steps))
	return res, nil
}

// newRecorder is a recorder with the file sink in dir and metrics of its own.
func newRecorder(dir string) (*replay.Recorder, *metrics.Metrics, func(), error) {
	sink, err := replay.NewFileSink(filepath.Join(dir, "replay"), replay.FileOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	m := metrics.New(prometheus.NewRegistry())
	rec, err := replay.NewRecorder([]replay.Named{{Sink: sink, URI: "file://" + dir}},
		replay.RecorderOptions{Queue: 10000, SpoolDir: filepath.Join(dir, "spool"), Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, nil, err
	}
	return rec, m, func() {}, nil
}
