package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/camproxy/camproxy/internal/testkit"
)

var s3KeyRE = regexp.MustCompile(`^runs/a/dt=(\d{4})-(\d{2})-(\d{2})/hr=(\d{2})/(\d{20})-host-1_x-(\d{6})\.jsonl\.gz$`)

func TestS3SinkWriteScan(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	c := fake.Client()
	sink := NewS3Sink(c, "replay", "/runs/a/", "host-1/x") // slashes trimmed; the writer made key-safe
	if sink.Name() != "s3" {
		t.Errorf("Name = %q", sink.Name())
	}
	if p := sink.BatchPolicy(); p.MaxEvents != 5000 || p.MaxWait != 5*time.Second {
		t.Errorf("BatchPolicy = %+v", p)
	}
	var want [][]byte
	for i := 0; i < 4; i++ {
		batch := testLines(i*300, 300)
		if err := sink.Write(t.Context(), batch); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
		want = append(want, batch...)
	}
	if err := sink.Write(t.Context(), nil); err != nil {
		t.Fatalf("empty Write: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	keys := fake.Keys(t, "replay", "")
	if len(keys) != 4 {
		t.Fatalf("%d objects, want one per batch: %v", len(keys), keys)
	}
	for i, k := range keys {
		m := s3KeyRE.FindStringSubmatch(k)
		if m == nil {
			t.Fatalf("key %q does not match %s", k, s3KeyRE)
		}
		nanos, _ := strconv.ParseInt(m[5], 10, 64)
		at := time.Unix(0, nanos).UTC()
		if got := m[1] + "/" + m[2] + "/" + m[3] + "/" + m[4]; got != at.Format("2006/01/02/15") {
			t.Errorf("key %q: date path %s, but the nanos say %s", k, got, at.Format("2006/01/02/15"))
		}
		if time.Since(at) > time.Minute || time.Since(at) < 0 {
			t.Errorf("key %q: time %v is not now", k, at)
		}
		if seq, _ := strconv.Atoi(m[6]); seq != i {
			t.Errorf("key %q: seq %d, want %d", k, seq, i)
		}
	}

	head, err := c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String("replay"), Key: aws.String(keys[0])})
	if err != nil {
		t.Fatal(err)
	}
	if ct := aws.ToString(head.ContentType); ct != "application/x-ndjson" {
		t.Errorf("Content-Type = %q", ct)
	}
	if ce := aws.ToString(head.ContentEncoding); ce != "" {
		t.Errorf("Content-Encoding = %q, want none", ce)
	}

	// The object is gzip of the lines, each ending in "\n".
	obj, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("replay"), Key: aws.String(keys[1])})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	_ = obj.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(bytes.Join(want[300:600], []byte("\n")))+"\n" {
		t.Errorf("object body is not the batch's lines:\n%.200s", raw)
	}

	checkLines(t, scanAll(t, NewS3Source(c, "replay", "runs/a")), want)
	checkLines(t, scanAll(t, NewS3Source(c, "replay", "/runs/")), want)
	if got := scanAll(t, NewS3Source(c, "replay", "runs/b")); len(got) != 0 {
		t.Errorf("other prefix scanned %d lines", len(got))
	}
	// "runs/a" must not match "runs/ab".
	if err := NewS3Sink(c, "replay", "runs/ab", "w").Write(t.Context(), testLines(9000, 1)); err != nil {
		t.Fatal(err)
	}
	checkLines(t, scanAll(t, NewS3Source(c, "replay", "runs/a")), want)
}

func TestS3SinkKeyFormat(t *testing.T) {
	s := NewS3Sink(nil, "b", "p/q", "")
	at := time.Date(2026, 3, 4, 5, 6, 7, 89, time.FixedZone("X", 3*3600))
	if got, want := s.key(at, 1234567), "p/q/dt=2026-03-04/hr=02/01772589967000000089-writer-234567.jsonl.gz"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	s = NewS3Sink(nil, "b", "", "w")
	if got := s.key(time.Unix(0, 5).UTC(), 7); got != "dt=1970-01-01/hr=00/00000000000000000005-w-000007.jsonl.gz" {
		t.Errorf("key without prefix = %q", got)
	}
}

func TestS3SinkScanManyObjects(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	c := fake.Client()
	sink := NewS3Sink(c, "replay", "p", "w")
	var want [][]byte
	for i := 0; i < 7; i++ {
		b := testLines(i*3, 3)
		if err := sink.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	src := NewS3Source(c, "replay", "p")
	src.pageSize = 2 // four ListObjectsV2 pages
	before := fake.Requests()
	checkLines(t, scanAll(t, src), want)
	if n := fake.Requests() - before; n != 4+7 {
		t.Errorf("scan made %d requests, want 4 lists and 7 gets", n)
	}
}

func TestS3SinkRefused(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	c := fake.Client()
	sink := NewS3Sink(c, "replay", "p", "w")
	if err := sink.Write(t.Context(), testLines(0, 2)); err != nil {
		t.Fatal(err)
	}
	fake.Refuse(true)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := sink.Write(ctx, testLines(2, 2))
	if err == nil {
		t.Fatal("Write to a refusing S3 succeeded")
	}
	if !strings.Contains(err.Error(), "SlowDown") || !strings.Contains(err.Error(), "503") {
		t.Errorf("error does not carry S3's answer: %v", err)
	}
	if err := NewS3Source(c, "replay", "p").Scan(ctx, func([]byte) error { return nil }); err == nil {
		t.Error("Scan of a refusing S3 succeeded")
	}
	fake.Refuse(false)
	if err := sink.Write(t.Context(), testLines(2, 2)); err != nil {
		t.Fatalf("Write after Refuse(false): %v", err)
	}
	checkLines(t, scanAll(t, NewS3Source(c, "replay", "p")), testLines(0, 4))
}

func TestS3SourceCorruptObject(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	c := fake.Client()
	if err := NewS3Sink(c, "replay", "p", "w").Write(t.Context(), testLines(0, 3)); err != nil {
		t.Fatal(err)
	}
	for key, body := range map[string][]byte{
		"p/zzz/junk.jsonl.gz": []byte(`{"v":1}` + "\n"), // not gzip
		"p/zzz/trunc.jsonl.gz": func() []byte { // gzip cut short
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(bytes.Repeat([]byte("x\n"), 1000))
			_ = zw.Close()
			return b.Bytes()[:b.Len()-6]
		}(),
	} {
		if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("replay"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
		var n int
		err := NewS3Source(c, "replay", "p").Scan(t.Context(), func([]byte) error { n++; return nil })
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("Scan over %s = %v; want an error naming the key", key, err)
		}
		if n < 3 {
			t.Errorf("only %d lines before the corrupt object", n)
		}
		if _, err := c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String("replay"), Key: aws.String(key)}); err != nil {
			t.Fatal(err)
		}
	}

	// A folder marker is skipped; the callback's error comes back as is.
	if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("replay"), Key: aws.String("p/"), Body: bytes.NewReader(nil)}); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	if err := NewS3Source(c, "replay", "p").Scan(t.Context(), func([]byte) error { return stop }); err != stop {
		t.Fatalf("Scan = %v, want the callback's error", err)
	}
	if got := scanAll(t, NewS3Source(c, "replay", "p")); len(got) != 3 {
		t.Fatalf("scanned %d lines, want 3", len(got))
	}
}

func TestGunzipLines(t *testing.T) {
	long := strings.Repeat("y", 200<<10) // longer than the line reader's buffer
	gz := func(s string) *bytes.Buffer {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = io.WriteString(zw, s)
		_ = zw.Close()
		return &b
	}
	// One gunzipper reads object after object, as a scan does: nothing of one (its
	// unterminated last line, a long line) leaks into the next.
	var g gunzipper
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a\n\n" + long + "\r\nb\n" + long + "z", []string{"a", long, "b", long + "z"}},
		{"c\n" + long[:100], []string{"c", long[:100]}},
		{"", nil},
		{long + "\nd", []string{long, "d"}},
	} {
		var got []string
		if err := g.lines(gz(tc.in), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("got %d lines, want %d", len(got), len(tc.want))
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("line %d: %d bytes, want %d", i, len(got[i]), len(tc.want[i]))
			}
		}
	}
	if err := g.lines(strings.NewReader("not gzip"), func([]byte) error { return nil }); err == nil {
		t.Error("a stream that is not gzip read without an error")
	}
}

func TestS3SourceWindow(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	c := fake.Client()
	sink := NewS3Sink(c, "replay", "fleet", "w")
	byHour := writeBuffer(t, func(at time.Time) { sink.now = func() time.Time { return at } }, func(b [][]byte) error {
		return sink.Write(t.Context(), b)
	})
	src := NewS3Source(c, "replay", "fleet")
	checkWindows(t, src, byHour, nil)

	// A one-day window lists the top level once and then only the days it needs.
	day := bufDay
	before := fake.Requests()
	if _, err := src.SizeWindow(t.Context(), day.Add(time.Hour), day.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := fake.Requests() - before; n != 2 {
		t.Errorf("an hour's window listed %d times, want 2 (the top level, its day)", n)
	}
	before = fake.Requests()
	if _, err := src.SizeWindow(t.Context(), day.Add(-time.Hour), day.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := fake.Requests() - before; n != 3 {
		t.Errorf("a window over midnight (and a month's end) listed %d times, want 3", n)
	}

	// Keys of the layout before partitioning (YYYY/MM/DD/HH/) are windowed too, and
	// keys directly under the prefix, or under a prefix that is no time, always read.
	zw := gzip.NewWriter(nil) // one for every object: a new one allocates ~800 KB
	put := func(key string, lines [][]byte) {
		t.Helper()
		var b bytes.Buffer
		zw.Reset(&b)
		_, _ = zw.Write(append(bytes.Join(lines, []byte("\n")), '\n'))
		_ = zw.Close()
		if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("replay"), Key: aws.String(key), Body: bytes.NewReader(b.Bytes())}); err != nil {
			t.Fatal(err)
		}
	}
	for h := range bufDays * 24 {
		hour := bufStart.Add(time.Duration(h) * time.Hour)
		line := fmt.Appendf(nil, `{"legacy":%d}`, h)
		put(fmt.Sprintf("fleet/%s/%020d-old-%06d.jsonl.gz", hour.Format("2006/01/02/15"), hour.UnixNano(), h), [][]byte{line})
		byHour[hour] = append(byHour[hour], string(line))
	}
	put("fleet/flat.jsonl.gz", [][]byte{[]byte(`{"flat":1}`)})
	put("fleet/misc/x.jsonl.gz", [][]byte{[]byte(`{"misc":1}`)})
	checkWindows(t, src, byHour, []string{`{"flat":1}`, `{"misc":1}`})
}

// BenchmarkS3 is what the S3 sink costs per 5-event batch and the source per scan
// of 200 such objects, against the in-process fake (its requests included).
//
//	go test -run '^$' -bench '^BenchmarkS3$' -benchmem ./replay
func BenchmarkS3(b *testing.B) {
	fake := testkit.NewS3("replay")
	b.Cleanup(fake.Close)
	c := fake.Client()
	batch := testLines(0, 5)
	b.Run("write", func(b *testing.B) {
		sink := NewS3Sink(c, "replay", "write", "w")
		for b.Loop() {
			if err := sink.Write(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	sink := NewS3Sink(c, "replay", "scan", "w")
	for range 200 {
		if err := sink.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("scan", func(b *testing.B) {
		src := NewS3Source(c, "replay", "scan")
		for b.Loop() {
			n := 0
			if err := src.Scan(b.Context(), func([]byte) error { n++; return nil }); err != nil || n != 200*len(batch) {
				b.Fatalf("scanned %d lines, %v", n, err)
			}
		}
	})
}
