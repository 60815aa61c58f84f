//go:build unix

package replay

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// BenchmarkRecorderFileSink: steps through the recorder (encoding on its goroutine,
// batches fsynced by the file sink) until every one is on disk. A realistic step: the
// tool call and tool result new since the previous turn, and the answer. Reports
// steps/s; issue 9 asks for at least 20 000.
func BenchmarkRecorderFileSink(b *testing.B) {
	rec, sink, step := benchRecorder(b, b.N+1)
	b.SetBytes(int64(stepSize(step(0))))
	b.ReportAllocs()
	start := time.Now()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := range b.N { // not b.Loop: the queue is sized by b.N before the loop
		rec.Add(step(i))
	}
	if err := rec.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/step")
	if n := rec.Spooled()[sink]; n != 0 {
		b.Fatalf("%d steps spooled: the sink fell behind the queue", n)
	}
}

// benchRecorder is a recorder with a file sink (URI sink) in a temporary directory,
// and step(i), a realistic step: the tool call and tool result new since the
// previous turn, and the answer.
func benchRecorder(b *testing.B, queue int) (rec *Recorder, sink string, step func(i int) *StepEvent) {
	dir := b.TempDir()
	fs, err := NewFileSink(filepath.Join(dir, "replay"), FileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sink = "file://" + dir
	rec, err = NewRecorder([]Named{{Sink: fs, URI: sink}},
		RecorderOptions{Queue: queue, SpoolDir: filepath.Join(dir, "spool"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	tool := `{"reservation_id": "4WQ150", "user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA", "flight_type": "one_way", ` +
		`"cabin": "economy", "flights": [{"origin": "JFK", "destination": "SEA", "flight_number": "HAT136", "date": "2024-05-20", "price": 183}], ` +
		`"passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}], "payment_history": [{"payment_id": "certificate_7504069", "amount": 183}]}`
	msgs := []protocol.Message{
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_8Kx2", Type: "function", Name: "get_reservation_details", Arguments: `{"reservation_id":"4WQ150"}`}}},
		{Role: "tool", ToolCallID: "call_8Kx2", Name: "get_reservation_details", Content: tool},
	}
	answer := protocol.Message{Role: "assistant", Content: strings.Repeat("Your reservation 4WQ150 is confirmed for May 20. ", 4)}
	at := time.Now()
	return rec, sink, func(i int) *StepEvent {
		return &StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep_bench", Turn: i, Messages: msgs, Response: &answer,
			Usage: protocol.Usage{InputTokens: 4000, OutputTokens: 60}, Timing: Timing{Augment: 0.01, UpstreamTTFB: 1.2, Total: 1.5}, Status: 200, At: at}
	}
}

// BenchmarkRecorderPaced: steps added one at a time with a pause between them, as a
// proxy's calls add them (the recorder idle between steps, not a tight loop that
// keeps its goroutines busy), through the file sink until every one is on disk.
// cpu-ns/step is the process CPU (getrusage) per step over that of the same loop of
// pauses without the recorder, run first: the encoding, the sink's writes and every
// goroutine hand-off the recorder makes per step. Noisy on a shared machine:
// compare runs made together.
func BenchmarkRecorderPaced(b *testing.B) {
	rec, _, step := benchRecorder(b, 10000)
	const pause = 20 * time.Microsecond
	idle := cpuTime(b)
	for range b.N {
		time.Sleep(pause)
	}
	idle = cpuTime(b) - idle
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		rec.Add(step(i))
		time.Sleep(pause)
	}
	if err := rec.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0-idle)/float64(b.N), "cpu-ns/step")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
