package app

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// flushWriter is a compressing writer whose Flush ends what was written so far at a
// point the reader can decode, as a server flushing a stream does.
type flushWriter interface {
	io.WriteCloser
	Flush() error
}

// compressors write each Content-Encoding camproxy decodes.
var compressors = map[string]func(io.Writer) flushWriter{
	"gzip":    func(w io.Writer) flushWriter { return gzip.NewWriter(w) },
	"deflate": func(w io.Writer) flushWriter { return zlib.NewWriter(w) },
	"br":      func(w io.Writer) flushWriter { return brotli.NewWriter(w) },
	"zstd": func(w io.Writer) flushWriter {
		z, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return z
	},
}

// compressedUpstream answers chat completions compressed with the coding named by the
// request's model ("gpt-4o+gzip"), streamed (each event flushed) when asked, and keeps
// the exact bytes it sent for each task so that the test can compare what the agent got.
type compressedUpstream struct {
	*httptest.Server
	sent chan []byte
}

func newCompressedUpstream(t *testing.T) *compressedUpstream {
	u := &compressedUpstream{sent: make(chan []byte, 64)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := gjson.ParseBytes(body)
		_, coding, _ := strings.Cut(req.Get("model").String(), "+")
		turn := len(req.Get("messages").Array())
		rep := testkit.Reply{Content: fmt.Sprintf("answer %d, sent as %s", turn, coding)}
		var out bytes.Buffer
		cw := compressors[coding](&out)
		w.Header().Set("Content-Encoding", coding)
		if req.Get("stream").Bool() {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			for _, ev := range testkit.StreamEvents("gpt-4o", rep, true, 20) {
				at := out.Len()
				_, _ = io.WriteString(cw, "data: "+ev+"\n\n")
				_ = cw.Flush()
				_, _ = w.Write(out.Bytes()[at:])
				w.(http.Flusher).Flush()
			}
			at := out.Len()
			_ = cw.Close()
			_, _ = w.Write(out.Bytes()[at:])
		} else {
			ans, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": rep.Content}, "finish_reason": "stop"}},
				"usage":   map[string]any{"prompt_tokens": 20, "completion_tokens": 7}})
			_, _ = cw.Write(ans)
			_ = cw.Close()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out.Bytes())
		}
		u.sent <- bytes.Clone(out.Bytes())
	}))
	t.Cleanup(u.Close)
	return u
}

// TestCompressedAnswersRecorded: an upstream answering gzip, deflate, br or zstd —
// whole or streamed — reaches the agent byte for byte as the upstream encoded it,
// while the replay buffer records the decoded answer whole, and the next turn stitches
// to it (the episode advanced before the agent had the answer).
func TestCompressedAnswersRecorded(t *testing.T) {
	up := newCompressedUpstream(t)
	e := newEnv(t, func(c *config.Config) { c.Upstreams["openai"].BaseURL = up.URL })
	// The agent decodes nothing itself here: it must see the bytes as sent.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	post := func(body []byte) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	type run struct{ coding, task string }
	var runs []run
	for coding := range compressors {
		for _, stream := range []bool{false, true} {
			task := fmt.Sprintf("Task for %s (stream %v).", coding, stream)
			runs = append(runs, run{coding, task})
			msgs := []map[string]string{{"role": "user", "content": task}}
			for turn := range 2 {
				body, _ := json.Marshal(map[string]any{"model": "gpt-4o+" + coding, "stream": stream, "messages": msgs})
				resp, got := post(body)
				sent := <-up.sent
				if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != coding {
					t.Fatalf("%s turn %d: status %d, Content-Encoding %q", task, turn, resp.StatusCode, resp.Header.Get("Content-Encoding"))
				}
				if !bytes.Equal(got, sent) {
					t.Fatalf("%s turn %d: the agent got %d bytes that differ from the %d the upstream sent", task, turn, len(got), len(sent))
				}
				msgs = append(msgs, map[string]string{"role": "assistant", "content": fmt.Sprintf("answer %d, sent as %s", len(msgs), coding)},
					map[string]string{"role": "user", "content": "and then?"})
			}
		}
	}
	buf, steps := recordedBuffer(t, e)
	for _, s := range steps {
		if s.Response == nil || s.Error != "" || s.Status != 200 {
			t.Errorf("step %s/%d: response %v, error %q", s.EpisodeID, s.Turn, s.Response, s.Error)
		}
	}
	if len(buf.Episodes) != len(runs) {
		t.Fatalf("%d episodes for %d runs", len(buf.Episodes), len(runs))
	}
	for _, r := range runs {
		var found bool
		for _, ep := range buf.Episodes {
			if ep.Task != r.task {
				continue
			}
			found = true
			if ep.Steps != 2 || len(ep.Messages) != 4 {
				t.Errorf("%s: %d steps, %d messages: %+v", r.task, ep.Steps, len(ep.Messages), ep.Messages)
				continue
			}
			for i, want := range []string{r.task, "answer 1, sent as " + r.coding, "and then?", "answer 3, sent as " + r.coding} {
				if ep.Messages[i].Content != want {
					t.Errorf("%s: message %d %q, want %q", r.task, i, ep.Messages[i].Content, want)
				}
			}
			if ep.Usage.OutputTokens != 14 {
				t.Errorf("%s: usage %+v", r.task, ep.Usage)
			}
		}
		if !found {
			t.Errorf("no episode for %q", r.task)
		}
	}
}
