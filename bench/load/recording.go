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

// RecordResult is the replay recorder's sustained rate into the file sink.
type RecordResult struct {
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
func recordSteps(convs []*conv, n int) (*RecordResult, error) {
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
	sink, err := replay.NewFileSink(filepath.Join(dir, "replay"), replay.FileOptions{})
	if err != nil {
		return nil, err
	}
	m := metrics.New(prometheus.NewRegistry())
	const queue = 10000
	rec, err := replay.NewRecorder([]replay.Named{{Sink: sink, URI: "file://" + dir}},
		replay.RecorderOptions{Queue: queue, SpoolDir: filepath.Join(dir, "spool"), Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
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
	el := time.Since(start)
	written := int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "written")))
	spooled := int(testutil.ToFloat64(m.ReplayEvents.WithLabelValues(replay.TypeStep, "file", "spooled")))
	return &RecordResult{Steps: n, Written: written, Spooled: spooled, Seconds: el.Seconds(),
		StepsPerSec: float64(written) / el.Seconds(), AvgBytes: size / max(1, len(steps))}, nil
}
