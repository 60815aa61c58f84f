package admin

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
)

// runnerFunc is the harness's runner inside the bubble: it accepts every job and
// says which episode it was given.
type runnerFunc func(*http.Request) (*http.Response, error)

func (f runnerFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRolloutQueueOutsideTimeout: with one slot, a rollout that waited its turn
// for longer than its timeout_s still runs for its whole timeout_s once it has the
// slot; the wait is bounded by queue_timeout_s (or rollouts.queue_timeout) alone.
// camproxy_rollouts_in_flight and _queued count the slot and the waiters meanwhile.
func TestRolloutQueueOutsideTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := episode.NewMemory(time.Hour, nil)
		defer store.Close()
		started := make(chan string, 8)
		client := &http.Client{Transport: runnerFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			started <- gjson.GetBytes(b, "episode_id").String()
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}}, nil
		})}
		m := metrics.New(prometheus.NewRegistry())
		h := New(Options{Logger: slog.New(slog.DiscardHandler), Episodes: store, Record: func(any) {}, Metrics: m,
			Rollouts: RolloutOptions{Runner: "http://runner.invalid/run", MaxInFlight: 1, DefaultTimeout: time.Minute, Client: client}})
		gauges := func(when string, inFlight, queued float64) {
			t.Helper()
			if f, q := testutil.ToFloat64(m.RolloutsInFlight), testutil.ToFloat64(m.RolloutsQueued); f != inFlight || q != queued {
				t.Fatalf("%s: rollouts in flight %v, queued %v; want %v, %v", when, f, q, inFlight, queued)
			}
		}
		type answer struct {
			code int
			body string
		}
		post := func(body string) chan answer {
			ch := make(chan answer, 1)
			go func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, localRequest(http.MethodPost, "/v1/rollouts", strings.NewReader(body)))
				ch <- answer{w.Code, w.Body.String()}
			}()
			return ch
		}
		reward := func(id string) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, localRequest(http.MethodPost, "/v1/feedback", strings.NewReader(`{"episode_id":"`+id+`","reward":0.75}`)))
			if w.Code/100 != 2 {
				t.Fatalf("feedback: %d %s", w.Code, w.Body)
			}
		}

		a := post(`{"task_id":"a","context":"c","timeout_s":10}`)
		synctest.Wait()
		<-started                                                                     // a holds the only slot
		b := post(`{"task_id":"b","context":"c","timeout_s":10}`)                     // waits under the default queue timeout
		c := post(`{"task_id":"c","context":"c","timeout_s":10,"queue_timeout_s":3}`) // gives up waiting after 3 s
		synctest.Wait()
		gauges("a runs, b and c wait", 1, 2)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := <-c; got.code != 504 || !strings.Contains(got.body, "no rollout slot free within queue_timeout 3s (rollouts.max_in_flight = 1)") {
			t.Fatalf("queue timeout: %d %s", got.code, got.body)
		}
		if got := <-a; got.code != 504 || !strings.Contains(got.body, "no reward posted to /v1/feedback within 10s") {
			t.Fatalf("a: %d %s", got.code, got.body)
		}
		bID := <-started // b has the slot at 10 s
		gauges("b runs", 1, 0)
		time.Sleep(8 * time.Second)
		synctest.Wait()
		select {
		case got := <-b:
			t.Fatalf("b answered %d %s after 18 s, 8 s into its 10 s run", got.code, got.body)
		default:
		}
		reward(bID)
		if got := <-b; got.code != 200 || gjson.Get(got.body, "reward").Float() != 0.75 {
			t.Fatalf("b: %d %s", got.code, got.body)
		}
		gauges("all done", 0, 0)
	})
}

func TestParseRolloutQueueTimeout(t *testing.T) {
	for _, c := range []struct {
		body       string
		run, queue time.Duration
		msg        string
	}{
		{`{"task_id":"t"}`, time.Minute, time.Hour, ""},
		{`{"task_id":"t","timeout_s":30,"queue_timeout_s":1.5}`, 30 * time.Second, 1500 * time.Millisecond, ""},
		{`{"task_id":"t","queue_timeout_s":0}`, 0, 0, `"queue_timeout_s" must be a number of seconds > 0`},
		{`{"task_id":"t","queue_timeout_s":"1h"}`, 0, 0, `"queue_timeout_s" must be a number`},
		{`{"task_id":"t","queue_timeout_s":1e9}`, 0, 0, "at most 86400"},
	} {
		rb, msg := parseRollout([]byte(c.body), time.Minute, time.Hour)
		if c.msg != "" {
			if !strings.Contains(msg, c.msg) {
				t.Errorf("%s: %q, want %q", c.body, msg, c.msg)
			}
			continue
		}
		if msg != "" || rb.Timeout != c.run || rb.QueueTimeout != c.queue {
			t.Errorf("%s: %v %v %q", c.body, rb.Timeout, rb.QueueTimeout, msg)
		}
	}
}
