package replay

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// BenchmarkRecorderFileSink: steps through the recorder (encoding on its goroutine,
// batches fsynced by the file sink) until every one is on disk. A realistic step: the
// tool call and tool result new since the previous turn, and the answer. Reports
// steps/s; issue 9 asks for at least 20 000.
func BenchmarkRecorderFileSink(b *testing.B) {
	dir := b.TempDir()
	sink, err := NewFileSink(filepath.Join(dir, "replay"), FileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rec, err := NewRecorder([]Named{{Sink: sink, URI: "file://" + dir}},
		RecorderOptions{Queue: b.N + 1, SpoolDir: filepath.Join(dir, "spool"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	b.SetBytes(int64(len(tool) + len(answer.Content) + 400))
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for i := range b.N { // not b.Loop: the queue is sized by b.N before the loop
		rec.Add(&StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep_bench", Turn: i, Messages: msgs, Response: &answer,
			Usage: protocol.Usage{InputTokens: 4000, OutputTokens: 60}, Timing: Timing{Augment: 0.01, UpstreamTTFB: 1.2, Total: 1.5}, Status: 200, At: start})
	}
	if err := rec.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
	if n := rec.Spooled()["file://"+dir]; n != 0 {
		b.Fatalf("%d steps spooled: the sink fell behind the queue", n)
	}
}
