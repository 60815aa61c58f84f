package learn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// RolloutRequest asks the harness to run the agent on a task with a context.
type RolloutRequest struct {
	TaskID, Task, Context string
}

// Rollouter runs the agent once and returns its reward.
type Rollouter interface {
	Rollout(ctx context.Context, r RolloutRequest) (RolloutResult, error)
}

// HTTPRollouts calls camproxy's POST {Base}/v1/rollouts, whose runner is the user's
// harness: {task_id, task, context, timeout_s} → {episode_id, reward, success}.
type HTTPRollouts struct {
	Base    string        // camproxy's admin base URL, e.g. http://127.0.0.1:9090
	Token   string        // the admin token, "" = none
	Timeout time.Duration // timeout_s of one rollout; default 10m
	Retries int           // retries on 429/502/503/504 and connection errors; < 0 = none
	Backoff time.Duration // first retry wait, doubled each retry; default 1s
	Client  *http.Client  // nil = a plain client
}

// Rollout implements Rollouter.
func (h *HTTPRollouts) Rollout(ctx context.Context, r RolloutRequest) (RolloutResult, error) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	backoff := h.Backoff
	if backoff <= 0 {
		backoff = time.Second
	}
	client := h.Client
	if client == nil {
		client = &http.Client{}
	}
	body, _ := json.Marshal(map[string]any{"task_id": r.TaskID, "task": r.Task, "context": r.Context, "timeout_s": timeout.Seconds()})
	url := strings.TrimRight(h.Base, "/") + "/v1/rollouts"
	for n := 0; ; n++ {
		res, retry, err := h.once(ctx, client, url, body, timeout)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return RolloutResult{}, ctx.Err()
		}
		if !retry || n >= h.Retries {
			return RolloutResult{}, fmt.Errorf("rollout of task %s: %w", r.TaskID, err)
		}
		t := time.NewTimer(backoff << min(n, 10))
		select {
		case <-ctx.Done():
			t.Stop()
			return RolloutResult{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (h *HTTPRollouts) once(ctx context.Context, client *http.Client, url string, body []byte, timeout time.Duration) (RolloutResult, bool, error) {
	// The server answers 504 itself when no reward comes in time; a little more here.
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return RolloutResult{}, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		_, isNet := errors.AsType[net.Error](err)
		return RolloutResult{}, isNet || errors.Is(err, io.ErrUnexpectedEOF), err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return RolloutResult{}, true, err
	}
	if resp.StatusCode != http.StatusOK {
		retry := resp.StatusCode == 429 || resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504
		return RolloutResult{}, retry, fmt.Errorf("POST %s: %s: %s", url, resp.Status, clipRunes(strings.TrimSpace(string(data)), 300))
	}
	var out struct {
		EpisodeID string   `json:"episode_id"`
		Reward    *float64 `json:"reward"`
		Success   *bool    `json:"success"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Reward == nil {
		return RolloutResult{}, false, fmt.Errorf("POST %s: the answer holds no reward: %s", url, clipRunes(string(data), 300))
	}
	return RolloutResult{EpisodeID: out.EpisodeID, Reward: *out.Reward, Success: out.Success}, false, nil
}
