package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestFormatOf(t *testing.T) {
	for path, want := range map[string]string{"": "text", "r.txt": "text", "r.html": "html", "R.HTM": "html", "out/r.json": "json", "r.json.gz": "text"} {
		if got := FormatOf(path); got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestWriteFormat: Write is the writer of each format.
func TestWriteFormat(t *testing.T) {
	rs := Reports{{Source: "file:///tmp/replay"}}
	for format, write := range map[string]func(*bytes.Buffer) error{
		FormatText: func(b *bytes.Buffer) error { return rs.WriteText(b) },
		FormatJSON: func(b *bytes.Buffer) error { return rs.WriteJSON(b) },
		FormatHTML: func(b *bytes.Buffer) error { return rs.WriteHTML(b) },
	} {
		var got, want bytes.Buffer
		if err := rs.Write(&got, format); err != nil {
			t.Fatal(err)
		}
		if err := write(&want); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || strings.TrimSpace(got.String()) == "" {
			t.Errorf("Write(%s) is not its writer's:\n%s", format, got.String())
		}
	}
}
