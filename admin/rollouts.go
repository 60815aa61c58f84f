package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/replay"
)

// RolloutOptions configure POST /v1/rollouts.
type RolloutOptions struct {
	Runner         string // the harness endpoint that runs an agent; "" = off
	MaxInFlight    int
	DefaultTimeout time.Duration // a run's, from the moment it has a slot
	// QueueTimeout bounds the wait for one of the MaxInFlight slots when a request
	// gives no queue_timeout_s. It is not part of the run's timeout: a trainer asks
	// for more rollouts at once than run, and a run that waited its turn would
	// otherwise time out and score like a real failure. 0 = DefaultQueueTimeout.
	QueueTimeout time.Duration
	Client       *http.Client // nil = a default client
}

// rollouts turns "run the agent with this context" into a reward: it creates an
// episode whose context is fixed, asks the harness's runner to run the agent on it
// (through camproxy, with the episode header), and waits for /v1/feedback.
type rollouts struct {
	o   RolloutOptions
	sem chan struct{}
	// inFlight and queued count the slots taken and the rollouts waiting for one
	// (camproxy_rollouts_in_flight, _queued): an operator sees a trainer's batch
	// queue up, and a test sees rollouts held back.
	inFlight, queued gauge

	mu      sync.Mutex
	waiters map[string]chan struct{}
}

// DefaultQueueTimeout is RolloutOptions.QueueTimeout's default.
const DefaultQueueTimeout = time.Hour

func newRollouts(o RolloutOptions, m *metrics.Metrics) *rollouts {
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.QueueTimeout <= 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	r := &rollouts{o: o, sem: make(chan struct{}, max(o.MaxInFlight, 1)), waiters: map[string]chan struct{}{}}
	if m != nil {
		r.inFlight, r.queued = m.RolloutsInFlight, m.RolloutsQueued
	}
	return r
}

// gauge is the part of a Prometheus gauge a count needs; nil counts nothing.
type gauge interface{ Add(float64) }

func add(g gauge, d float64) {
	if g != nil {
		g.Add(d)
	}
}

// rewarded wakes a rollout waiting on this episode (feedback on this replica; others
// are found by polling the episode store).
func (r *rollouts) rewarded(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.waiters[id]; ok {
		close(ch)
		delete(r.waiters, id)
	}
}

func (r *rollouts) wait(id string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.waiters[id] = ch
	return ch
}

func (r *rollouts) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiters, id)
}

type rolloutBody struct {
	TaskID, Task, Context string
	Timeout               time.Duration // the run's
	QueueTimeout          time.Duration // the wait for a slot
}

// maxRolloutTimeout bounds timeout_s: an agent run of more than a day is a mistake
// (and a huge number would overflow the duration).
const maxRolloutTimeout = 24 * time.Hour

func parseRollout(body []byte, def, defQueue time.Duration) (rolloutBody, string) {
	var rb rolloutBody
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return rb, "rollout body must be a JSON object"
	}
	doc := gjson.ParseBytes(body)
	id := doc.Get("task_id")
	switch id.Type {
	case gjson.String:
		rb.TaskID = id.String()
	case gjson.Number:
		rb.TaskID = id.Raw
	}
	if rb.TaskID == "" {
		return rb, `"task_id" is required (a string or a number)`
	}
	if !episode.ValidID(rb.TaskID) {
		// It travels to the harness as the X-CAM-Task-Id header.
		return rb, `"task_id" must be 1-128 characters of A-Z a-z 0-9 . _ : -`
	}
	for key, dst := range map[string]*string{"task": &rb.Task, "context": &rb.Context} {
		v := doc.Get(key)
		if v.Exists() && v.Type != gjson.String {
			return rb, fmt.Sprintf("%q must be a string", key)
		}
		*dst = v.String()
	}
	rb.Timeout, rb.QueueTimeout = def, defQueue
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"timeout_s", &rb.Timeout}, {"queue_timeout_s", &rb.QueueTimeout}} {
		t := doc.Get(f.key)
		if !t.Exists() {
			continue
		}
		if t.Type != gjson.Number || t.Float() <= 0 || t.Float() > maxRolloutTimeout.Seconds() {
			return rb, fmt.Sprintf(`%q must be a number of seconds > 0 and at most %g`, f.key, maxRolloutTimeout.Seconds())
		}
		*f.dst = time.Duration(t.Float() * float64(time.Second))
	}
	return rb, ""
}

// rollout handles POST /v1/rollouts {task_id, task, context, timeout_s,
// queue_timeout_s} → {episode_id, reward, success}; 504 when no slot frees up
// within queue_timeout_s, or no reward arrives within timeout_s of the start.
func (a *api) rollout(w http.ResponseWriter, r *http.Request) {
	ro := a.rollouts
	if ro == nil || ro.o.Runner == "" {
		writeErr(w, http.StatusServiceUnavailable, "the rollout API is off: set rollouts.runner to the harness endpoint that runs the agent")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFeedbackBytes))
	if err != nil {
		writeErr(w, http.StatusRequestEntityTooLarge, "rollout body too large")
		return
	}
	rb, msg := parseRollout(body, ro.o.DefaultTimeout, ro.o.QueueTimeout)
	if msg != "" {
		writeErr(w, http.StatusBadRequest, msg)
		return
	}
	if !ro.acquire(r.Context(), rb.QueueTimeout) {
		writeErr(w, http.StatusGatewayTimeout, fmt.Sprintf("no rollout slot free within queue_timeout %s (rollouts.max_in_flight = %d)", rb.QueueTimeout, cap(ro.sem)))
		return
	}
	defer ro.release()
	// The run's timeout starts once it has a slot.
	ctx, cancel := context.WithTimeout(r.Context(), rb.Timeout)
	defer cancel()
	id := newRolloutID()
	now := time.Now().UTC()
	ep := &episode.Episode{ID: id, TaskID: rb.TaskID, Task: rb.Task, Arm: "rollout", Context: rb.Context,
		ContextSource: "rollout", StartedAt: now, UpdatedAt: now}
	if _, _, err := a.o.Episodes.Create(ctx, ep); err != nil {
		writeErr(w, http.StatusServiceUnavailable, "episode store unavailable; retry")
		return
	}
	a.o.Record(&replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: replay.NewEventID(), EpisodeID: id,
		TaskID: rb.TaskID, Task: rb.Task, Arm: ep.Arm, Context: rb.Context, ContextSource: ep.ContextSource, StartedAt: now})
	woken := ro.wait(id)
	defer ro.forget(id)
	runnerErr := make(chan error, 1)
	go func() { runnerErr <- ro.run(ctx, id, rb) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-runnerErr:
			if err != nil {
				a.o.Logger.Warn("rollout runner failed", "episode", id, "err", err)
				writeErr(w, http.StatusBadGateway, fmt.Sprintf("rollout %s: the runner failed: %v", id, err))
				return
			}
			runnerErr = nil // it accepted the job; wait for the reward
		case <-woken:
			woken = nil
			if a.answerRollout(ctx, w, id) {
				return
			}
		case <-tick.C:
			if a.answerRollout(ctx, w, id) {
				return
			}
		case <-ctx.Done():
			writeErr(w, http.StatusGatewayTimeout, fmt.Sprintf("rollout %s: no reward posted to /v1/feedback within %s", id, rb.Timeout))
			return
		}
	}
}

// acquire takes a slot (bounded concurrency: the rest wait their turn), or gives
// up after wait or when the caller leaves. Only a rollout that has to wait counts as
// queued.
func (ro *rollouts) acquire(ctx context.Context, wait time.Duration) bool {
	select {
	case ro.sem <- struct{}{}:
		add(ro.inFlight, 1)
		return true
	default:
	}
	add(ro.queued, 1)
	defer add(ro.queued, -1)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case ro.sem <- struct{}{}:
		add(ro.inFlight, 1)
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives the slot back.
func (ro *rollouts) release() {
	add(ro.inFlight, -1)
	<-ro.sem
}

// answerRollout answers once the episode has its reward.
func (a *api) answerRollout(ctx context.Context, w http.ResponseWriter, id string) bool {
	ep, err := a.o.Episodes.Get(ctx, id)
	if err != nil || ep.Reward == nil {
		return false
	}
	writeJSON(w, http.StatusOK, map[string]any{"episode_id": id, "reward": *ep.Reward, "success": ep.Success, "turns": ep.Turns})
	return true
}

// run hands the rollout to the harness's runner.
func (ro *rollouts) run(ctx context.Context, id string, rb rolloutBody) error {
	payload, _ := json.Marshal(map[string]any{"episode_id": id, "task_id": rb.TaskID, "task": rb.Task,
		"headers": map[string]string{"X-CAM-Episode-Id": id, "X-CAM-Task-Id": rb.TaskID}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ro.o.Runner, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ro.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("runner answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

func newRolloutID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ro_" + hex.EncodeToString(b[:])
}
