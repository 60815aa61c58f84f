package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/replay"
)

// maxFeedbackBytes bounds a feedback body: metadata is for small annotations.
const maxFeedbackBytes = 1 << 20

// feedback handles POST /v1/feedback: the harness's reward for an episode. It is
// recorded as a reward event naming the episode's experiment; a second reward for
// the same episode replaces the first. Only the statistics of the episode's own
// experiment see it (Options.Reward): another experiment's arm of the same name
// never does.
func (a *api) feedback(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFeedbackBytes))
	if err != nil {
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("feedback body is larger than %d bytes", maxFeedbackBytes))
		return
	}
	fb, msg := parseFeedback(body)
	if msg != "" {
		writeErr(w, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ep, err := a.o.Episodes.Get(ctx, fb.EpisodeID)
	if errors.Is(err, episode.ErrNotFound) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("episode %q not found: unknown, or idle for longer than episodes.idle_timeout", fb.EpisodeID))
		return
	}
	if err != nil {
		a.o.Logger.Warn("feedback: episode store unavailable", "episode", fb.EpisodeID, "err", err)
		writeErr(w, http.StatusServiceUnavailable, "episode store unavailable; retry")
		return
	}
	previous := ep.Reward
	ep.Reward, ep.Success = &fb.Reward, fb.Success
	if err := a.o.Episodes.Update(ctx, ep); err != nil {
		a.o.Logger.Warn("feedback: episode store unavailable", "episode", fb.EpisodeID, "err", err)
		writeErr(w, http.StatusServiceUnavailable, "episode store unavailable; retry")
		return
	}
	a.o.Record(&replay.RewardEvent{V: replay.Version, Type: replay.TypeReward, ID: replay.NewEventID(), EpisodeID: ep.ID,
		Experiment: ep.Experiment, Reward: fb.Reward, Success: fb.Success, Metadata: fb.Metadata, At: time.Now().UTC()})
	if a.o.Reward != nil {
		a.o.Reward(ctx, ep.Experiment, ep.Arm, fb.Reward, previous)
	}
	a.rollouts.rewarded(ep.ID)
	if m := a.o.Metrics; m != nil {
		if previous == nil {
			m.Rewards.WithLabelValues(ep.Experiment, ep.Arm).Inc()
			m.RewardSum.WithLabelValues(ep.Experiment, ep.Arm).Add(fb.Reward)
		} else {
			m.RewardSum.WithLabelValues(ep.Experiment, ep.Arm).Add(fb.Reward - *previous)
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"episode_id": ep.ID, "status": "accepted"})
}

type feedbackBody struct {
	EpisodeID string
	Reward    float64
	Success   *bool
	Metadata  json.RawMessage
}

// parseFeedback validates a feedback body and says exactly what is wrong with it.
func parseFeedback(body []byte) (feedbackBody, string) {
	var fb feedbackBody
	if !gjson.ValidBytes(body) {
		return fb, "feedback body is not valid JSON"
	}
	doc := gjson.ParseBytes(body)
	if !doc.IsObject() {
		return fb, "feedback body must be a JSON object"
	}
	id := doc.Get("episode_id")
	if id.Type != gjson.String || id.String() == "" {
		return fb, `"episode_id" is required (a non-empty string)`
	}
	reward := doc.Get("reward")
	if reward.Type != gjson.Number {
		return fb, fmt.Sprintf(`"reward" must be a number (got %s)`, describe(reward))
	}
	fb.EpisodeID, fb.Reward = id.String(), reward.Float()
	if s := doc.Get("success"); s.Exists() && s.Type != gjson.Null {
		if s.Type != gjson.True && s.Type != gjson.False {
			return fb, fmt.Sprintf(`"success" must be true or false (got %s)`, describe(s))
		}
		b := s.Bool()
		fb.Success = &b
	}
	if md := doc.Get("metadata"); md.Exists() && md.Type != gjson.Null {
		if !md.IsObject() {
			return fb, `"metadata" must be a JSON object`
		}
		fb.Metadata = json.RawMessage(md.Raw)
	}
	return fb, ""
}

func describe(v gjson.Result) string {
	if !v.Exists() {
		return "nothing"
	}
	if len(v.Raw) > 40 {
		return v.Raw[:40] + "…"
	}
	return v.Raw
}

// episodeInfo handles GET /v1/episodes/{id}.
func (a *api) episodeInfo(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	ep, err := a.o.Episodes.Get(ctx, id)
	if errors.Is(err, episode.ErrNotFound) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("episode %q not found", id))
		return
	}
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "episode store unavailable; retry")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"episode_id": ep.ID, "task_id": ep.TaskID, "task": ep.Task, "experiment": ep.Experiment, "arm": ep.Arm, "context": ep.Context,
		"context_source": ep.ContextSource, "protocol": ep.Protocol, "model": ep.Model, "turns": ep.Turns,
		"reward": ep.Reward, "success": ep.Success, "started_at": ep.StartedAt, "updated_at": ep.UpdatedAt,
	})
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg}})
}
