package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/replay"
)

type events struct {
	mu  sync.Mutex
	got []*replay.RewardEvent
}

func (e *events) add(ev any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev.(*replay.RewardEvent))
}

func TestFeedback(t *testing.T) {
	store := episode.NewMemory(time.Minute, nil)
	defer store.Close()
	_, _, _ = store.Create(context.Background(), &episode.Episode{ID: "ep-1", Experiment: "coding", Arm: "cam", TaskID: "t1", Context: "ctx", Turns: 3})
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	var rec events
	h := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: reg, Metrics: m, Episodes: store, Record: rec.add})
	post := func(body string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest(http.MethodPost, "/v1/feedback", strings.NewReader(body)))
		if msg := gjson.GetBytes(w.Body.Bytes(), "error.message"); msg.Exists() {
			return w.Code, msg.String()
		}
		return w.Code, w.Body.String()
	}
	cases := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"not json", `{"episode_id":`, 400, "not valid JSON"},
		{"array", `[1]`, 400, "JSON object"},
		{"no episode", `{"reward":1}`, 400, `"episode_id" is required`},
		{"empty episode", `{"episode_id":"","reward":1}`, 400, `"episode_id" is required`},
		{"reward string", `{"episode_id":"ep-1","reward":"high"}`, 400, `"reward" must be a number (got "high")`},
		{"no reward", `{"episode_id":"ep-1"}`, 400, `"reward" must be a number (got nothing)`},
		{"success not bool", `{"episode_id":"ep-1","reward":1,"success":"yes"}`, 400, `"success" must be true or false`},
		{"metadata not object", `{"episode_id":"ep-1","reward":1,"metadata":3}`, 400, `"metadata" must be a JSON object`},
		{"unknown episode", `{"episode_id":"ep-404","reward":1}`, 404, `episode "ep-404" not found`},
		{"ok", `{"episode_id":"ep-1","reward":0.25,"success":false,"metadata":{"judge":"v1"}}`, 202, "accepted"},
		{"replace", `{"episode_id":"ep-1","reward":0.75,"success":true}`, 202, "accepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := post(c.body)
			if code != c.code || !strings.Contains(body, c.msg) {
				t.Fatalf("%d %s, want %d with %q", code, body, c.code, c.msg)
			}
		})
	}
	if len(rec.got) != 2 || rec.got[0].Reward != 0.25 || string(rec.got[0].Metadata) != `{"judge":"v1"}` || rec.got[1].Reward != 0.75 || !*rec.got[1].Success {
		t.Fatalf("reward events: %+v", rec.got)
	}
	if rec.got[0].ID == rec.got[1].ID || rec.got[1].V != 1 || rec.got[1].Type != "reward" {
		t.Fatalf("reward events need distinct ids and the v1 envelope: %+v", rec.got[1])
	}
	// The replaced reward moves the sum; the count stays one episode.
	mf, _ := reg.Gather()
	vals := map[string]float64{}
	for _, f := range mf {
		for _, mm := range f.GetMetric() {
			if f.GetName() == "camproxy_rewards_total" {
				vals["count"] = mm.GetCounter().GetValue()
				for _, l := range mm.GetLabel() {
					vals[l.GetName()+"="+l.GetValue()] = 1
				}
			}
			if f.GetName() == "camproxy_reward_sum" {
				vals["sum"] = mm.GetGauge().GetValue()
			}
		}
	}
	if vals["count"] != 1 || vals["sum"] != 0.75 || vals["experiment=coding"] != 1 || vals["arm=cam"] != 1 {
		t.Fatalf("reward metrics %v, want count 1 sum 0.75", vals)
	}

	w := httptest.NewRecorder()
	h.ServeHTTP(w, localRequest(http.MethodGet, "/v1/episodes/ep-1", nil))
	var info map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &info)
	if w.Code != 200 || info["arm"] != "cam" || info["task_id"] != "t1" || info["context"] != "ctx" || info["turns"] != 3.0 || info["reward"] != 0.75 {
		t.Fatalf("episode info %d %v", w.Code, info)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, localRequest(http.MethodGet, "/v1/episodes/nope", nil))
	if w.Code != 404 {
		t.Fatalf("unknown episode: %d", w.Code)
	}
}

func FuzzParseFeedback(f *testing.F) {
	f.Add([]byte(`{"episode_id":"ep-1","reward":0.5,"success":true,"metadata":{"a":1}}`))
	f.Add([]byte(`{"episode_id":1,"reward":"x"}`))
	f.Add([]byte(`[[[[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fb, msg := parseFeedback(body)
		if msg == "" && fb.EpisodeID == "" {
			t.Fatal("accepted a body without an episode id")
		}
	})
}

func FuzzParseRollout(f *testing.F) {
	f.Add([]byte(`{"task_id":"7","task":"rebook","context":"check fares","timeout_s":600}`))
	f.Add([]byte(`{"task_id":42,"timeout_s":1e300}`))
	f.Add([]byte(`{"task_id":"a\r\nX-Evil: 1"}`))
	f.Add([]byte(`{"task_id":"x","context":7}`))
	f.Add([]byte(`{"task_id":"x","queue_timeout_s":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rb, msg := parseRollout(body, time.Minute, time.Hour)
		if msg != "" {
			return
		}
		if !episode.ValidID(rb.TaskID) {
			t.Fatalf("accepted task_id %q, which cannot travel as a header", rb.TaskID)
		}
		if rb.Timeout <= 0 || rb.Timeout > maxRolloutTimeout || rb.QueueTimeout <= 0 || rb.QueueTimeout > maxRolloutTimeout {
			t.Fatalf("accepted timeouts %v, %v", rb.Timeout, rb.QueueTimeout)
		}
	})
}
