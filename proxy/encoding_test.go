package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/camproxy/camproxy/internal/testkit"
)

// flusher is a compressing writer that can end what it has so far at a point the
// decoder can reach without more input (a sync flush).
type flusher interface {
	io.WriteCloser
	Flush() error
}

// encoders are the codings camproxy decodes, by Content-Encoding name.
var encoders = map[string]func(io.Writer) flusher{
	"gzip":        func(w io.Writer) flusher { return gzip.NewWriter(w) },
	"x-gzip":      func(w io.Writer) flusher { return gzip.NewWriter(w) },
	"deflate":     func(w io.Writer) flusher { return zlib.NewWriter(w) },
	"deflate-raw": func(w io.Writer) flusher { f, _ := flate.NewWriter(w, flate.DefaultCompression); return f },
	"br":          func(w io.Writer) flusher { return brotli.NewWriter(w) },
	"zstd": func(w io.Writer) flusher {
		z, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return z
	},
}

// header is the Content-Encoding an encoder's output is sent with.
func header(name string) string {
	if name == "deflate-raw" {
		return "deflate" // servers that send raw deflate label it deflate
	}
	return name
}

// sseEvents is a stream of n SSE events.
func sseEvents(n int) []string {
	evs := make([]string, n)
	for i := range evs {
		evs[i] = fmt.Sprintf("data: {\"i\":%d,\"text\":%q}\n\n", i, strings.Repeat("token ", i%7))
	}
	return evs
}

// encodeFlushed encodes the events, flushing after each; cuts[i] is the length of
// the encoded stream once event i was flushed.
func encodeFlushed(t testing.TB, name string, evs []string) (enc []byte, cuts []int) {
	t.Helper()
	var buf bytes.Buffer
	w := encoders[name](&buf)
	for _, ev := range evs {
		if _, err := io.WriteString(w, ev); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		cuts = append(cuts, buf.Len())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), cuts
}

// TestDecodeBodyIncremental: a stream the upstream flushes per event reaches the
// Decoder per event, decoded, by the time Write returns for the bytes that end it —
// before the next bytes exist — whatever the coding and the chunking.
func TestDecodeBodyIncremental(t *testing.T) {
	evs := sseEvents(40)
	want := strings.Join(evs, "")
	for name := range encoders {
		t.Run(name, func(t *testing.T) {
			enc, cuts := encodeFlushed(t, name, evs)
			rng := rand.New(rand.NewPCG(1, uint64(len(enc))))
			var dst testkit.SyncBuffer
			w := decodeBody(header(name), &dst)
			if _, ok := w.(*codingWriter); !ok {
				t.Fatalf("%s: not decoded: %T", name, w)
			}
			at := 0
			for i, cut := range cuts {
				// The bytes up to this event's flush, in random chunks.
				for at < cut {
					n := min(cut-at, 1+rng.IntN(64))
					if _, err := w.Write(enc[at : at+n]); err != nil {
						t.Fatal(err)
					}
					at += n
				}
				if got, wantSoFar := dst.String(), strings.Join(evs[:i+1], ""); got != wantSoFar {
					t.Fatalf("after event %d the decoder has %d bytes, want %d:\n%q", i, len(got), len(wantSoFar), got)
				}
			}
			_, _ = w.Write(enc[at:]) // the coding's trailer
			if err := w.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if dst.String() != want {
				t.Fatal("decoded stream differs")
			}
		})
	}
}

// TestDecodeBodyWhole: a non-streamed answer comes in one chunk.
func TestDecodeBodyWhole(t *testing.T) {
	body := `{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"` + strings.Repeat("hello ", 5000) + `"}}]}`
	for name := range encoders {
		var buf bytes.Buffer
		w := encoders[name](&buf)
		_, _ = io.WriteString(w, body)
		_ = w.Close()
		var dst testkit.SyncBuffer
		bw := decodeBody(header(name), &dst)
		_, _ = bw.Write(buf.Bytes())
		if got := dst.String(); got != body {
			t.Errorf("%s: decoded %d bytes before Close, want %d", name, len(got), len(body))
		}
		if err := bw.Close(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDecodeBodyCodings(t *testing.T) {
	// gzip applied first, then br: "Content-Encoding: gzip, br".
	var gz, both bytes.Buffer
	g := gzip.NewWriter(&gz)
	_, _ = io.WriteString(g, "layered")
	_ = g.Close()
	b := brotli.NewWriter(&both)
	_, _ = b.Write(gz.Bytes())
	_ = b.Close()
	var dst testkit.SyncBuffer
	w := decodeBody("gzip, BR", &dst)
	_, _ = w.Write(both.Bytes())
	if err := w.Close(); err != nil || dst.String() != "layered" {
		t.Errorf("gzip, br: %q %v", dst.String(), err)
	}

	// Two gzip members, one after the other, are one body.
	var members bytes.Buffer
	for _, s := range []string{"first ", "second"} {
		g := gzip.NewWriter(&members)
		_, _ = io.WriteString(g, s)
		_ = g.Close()
	}
	var two testkit.SyncBuffer
	w = decodeBody("gzip", &two)
	_, _ = w.Write(members.Bytes())
	if err := w.Close(); err != nil || two.String() != "first second" {
		t.Errorf("two gzip members: %q %v", two.String(), err)
	}

	for _, v := range []string{"", "identity", " Identity "} {
		var id testkit.SyncBuffer
		w := decodeBody(v, &id)
		if _, ok := w.(identityBody); !ok {
			t.Errorf("%q: %T, want the bytes as they are", v, w)
		}
		_, _ = w.Write([]byte("plain"))
		if w.Close() != nil || id.String() != "plain" {
			t.Errorf("%q: %q", v, id.String())
		}
	}

	var none testkit.SyncBuffer
	w = decodeBody("compress", &none)
	_, _ = w.Write([]byte("x"))
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `"compress"`) || none.String() != "" {
		t.Errorf("unsupported coding: %v, %q", err, none.String())
	}
}

// TestDecodeBodyCorrupt: bytes that are not the coding end the decoding with an
// error naming it; Writes after that return at once.
func TestDecodeBodyCorrupt(t *testing.T) {
	for _, name := range []string{"gzip", "deflate", "br", "zstd"} {
		var dst testkit.SyncBuffer
		w := decodeBody(name, &dst)
		for range 3 {
			_, _ = w.Write([]byte("this is not compressed at all, not even a little bit"))
		}
		err := w.Close()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v", name, err)
		}
	}
	// Cut short: the stream ends before the coding does.
	enc, cuts := encodeFlushed(t, "gzip", sseEvents(3))
	var dst testkit.SyncBuffer
	w := decodeBody("gzip", &dst)
	_, _ = w.Write(enc[:cuts[1]])
	if err := w.Close(); err == nil {
		t.Error("a gzip stream cut short closed without error")
	}
	if got := dst.String(); got != strings.Join(sseEvents(3)[:2], "") {
		t.Errorf("what arrived before the cut is lost: %q", got)
	}
}

func TestIsZlibHeader(t *testing.T) {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_ = zw.Close()
	var f bytes.Buffer
	fw, _ := flate.NewWriter(&f, flate.BestSpeed)
	_, _ = fw.Write([]byte("abc"))
	_ = fw.Close()
	if !isZlibHeader(z.Bytes()) || isZlibHeader(f.Bytes()) || isZlibHeader([]byte{0x78}) {
		t.Errorf("zlib %x raw %x", z.Bytes()[:2], f.Bytes()[:2])
	}
}

// FuzzDecodeBody: any bytes in any chunking, under any coding, neither panic nor
// hang, and Close returns.
func FuzzDecodeBody(f *testing.F) {
	for name := range encoders {
		enc, _ := encodeFlushed(f, name, sseEvents(3))
		f.Add(header(name), enc, uint8(7))
	}
	f.Add("gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, uint8(1))
	f.Add("deflate, gzip", []byte("x"), uint8(0))
	f.Fuzz(func(t *testing.T, coding string, data []byte, step uint8) {
		var dst testkit.SyncBuffer
		w := decodeBody(coding, &dst)
		n := int(step) + 1
		for i := 0; i < len(data); i += n {
			_, _ = w.Write(data[i:min(len(data), i+n)])
		}
		_ = w.Close()
		_ = w.Close()
	})
}
