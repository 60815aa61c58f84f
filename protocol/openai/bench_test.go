package openai

import (
	"os"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// BenchmarkParseSplice parses a ~16 KB body of a real airline trajectory and
// splices context after its task, as the proxy does on every augmented call.
func BenchmarkParseSplice(b *testing.B) {
	body, err := os.ReadFile("testdata/airline16k.json")
	if err != nil {
		b.Fatal(err)
	}
	rules := protocol.DefaultTaskRules()
	text := "\n\n" + strings.Repeat("Check the cabin class before booking. ", 10)
	var buf []byte // reused, as the proxy reuses its splice buffer
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := Parse(body, rules)
		if err != nil || r.Task == "" {
			b.Fatal(err)
		}
		buf = r.SpliceTo(buf[:0], body, protocol.AppendToTask, text)
	}
}

// BenchmarkStreamDecoder decodes a realistic stream written in small chunks.
func BenchmarkStreamDecoder(b *testing.B) {
	stream := []byte(realisticStream)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		var d StreamDecoder
		for i := 0; i < len(stream); i += 97 {
			_, _ = d.Write(stream[i:min(i+97, len(stream))])
		}
		_ = d.Message()
	}
}
