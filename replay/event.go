// Package replay owns the replay buffer: the event schema (episode, step, reward,
// learn), the recorder that turns the data plane's finished turns (episode.Turn) into
// events and takes them off the request path into a bounded queue and a local spool,
// the sinks and sources (file, Redis Stream, S3), and the readers that reassemble
// whole episodes from any of them (Read, and Episodes streaming with a bounded spill),
// with selection and stats. URIs are replay/location's; exporting to a data lake
// (JSON Lines, Parquet) and importing history are replay/lake's, so that what records
// or reads a buffer links no Parquet.
package replay

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// Version is the schema version every event carries as "v".
const Version = 1

// Event types.
const (
	TypeEpisode = "episode"
	TypeStep    = "step"
	TypeReward  = "reward"
	TypeLearn   = "learn"
)

// EpisodeEvent opens an episode: who ran what, on which arm, with which exact context.
type EpisodeEvent struct {
	V         int    `json:"v"`
	Type      string `json:"type"`
	ID        string `json:"id"` // unique per event: readers drop duplicates of at-least-once delivery
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	Task      string `json:"task"`
	// Experiment is the experiment whose arms the episode was assigned among (absent
	// in events written before experiments had names on them).
	Experiment    string    `json:"experiment,omitempty"`
	Arm           string    `json:"arm"`
	Context       string    `json:"context"`
	ContextSource string    `json:"context_source"`
	Protocol      string    `json:"protocol"`
	Model         string    `json:"model"`
	StartedAt     time.Time `json:"started_at"`
}

// StepEvent is one call of an episode. Messages holds only the messages that are new
// since the episode's previous step, so an episode costs O(its tokens) to store.
type StepEvent struct {
	V         int    `json:"v"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	EpisodeID string `json:"episode_id"`
	// Experiment is its episode's (EpisodeEvent.Experiment): a reader filtering by
	// experiment need not join the episode first.
	Experiment string             `json:"experiment,omitempty"`
	Turn       int                `json:"turn"`
	Messages   []protocol.Message `json:"messages"`
	Response   *protocol.Message  `json:"response,omitempty"` // nil when the call produced no answer
	// AnswerTruncatedBytes is how many bytes of the answer Response lacks, cut at
	// replay.max_answer_bytes (the agent got it whole); absent when it is whole.
	AnswerTruncatedBytes int64          `json:"answer_truncated_bytes,omitempty"`
	Usage                protocol.Usage `json:"usage"`
	Timing               Timing         `json:"timing_ms"`
	Status               int            `json:"status"`
	Error                string         `json:"error,omitempty"`
	At                   time.Time      `json:"at"`
	// Transport is "websocket" for a turn that arrived as a response.create on a
	// Responses API socket; absent for HTTP.
	Transport string `json:"transport,omitempty"`
}

// Timing is a step's latencies in milliseconds.
type Timing struct {
	Augment      float64 `json:"augment"`
	UpstreamTTFB float64 `json:"upstream_ttfb"`
	Total        float64 `json:"total"`
}

// RewardEvent is the harness's verdict on an episode. A later reward for the same
// episode replaces an earlier one.
type RewardEvent struct {
	V         int    `json:"v"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	EpisodeID string `json:"episode_id"`
	// Experiment is the rewarded episode's, when the episode store still knew it.
	Experiment string          `json:"experiment,omitempty"`
	Reward     float64         `json:"reward"`
	Success    *bool           `json:"success,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	At         time.Time       `json:"at"`
}

// LearnEvent is one decision of the online playbook learner: a version written, a
// candidate arm added, a candidate promoted to champion, or stopped. It belongs to no
// episode.
type LearnEvent struct {
	V               int                      `json:"v"`
	Type            string                   `json:"type"`
	ID              string                   `json:"id"`
	Experiment      string                   `json:"experiment,omitempty"`
	Action          string                   `json:"action"`             // version | candidate | promoted | stopped
	Version         int                      `json:"version"`            // the playbook version the decision is about
	Arm             string                   `json:"arm"`                // the arm serving it (learn-vN, or the configured champion)
	Parent          int                      `json:"parent"`             // the version it was learnt from (0 = none)
	Champion        string                   `json:"champion"`           // the champion arm after the decision
	ChampionVersion int                      `json:"champion_version"`   // its version
	Iteration       int                      `json:"iteration"`          // the learner's step that made the version
	Entries         int                      `json:"entries"`            // entries of the version
	Applied         int                      `json:"applied"`            // edits the step applied
	Reason          string                   `json:"reason,omitempty"`   // why a candidate was stopped or promoted
	PBetter         *float64                 `json:"p_better,omitempty"` // P(candidate > champion) at a promote/stop
	Stats           map[string]LearnArmStats `json:"stats,omitempty"`    // the arms compared, at the decision
	At              time.Time                `json:"at"`
}

// Learn actions.
const (
	LearnVersion   = "version"
	LearnCandidate = "candidate"
	LearnPromoted  = "promoted"
	LearnStopped   = "stopped"
)

// LearnArmStats are an arm's reward statistics when a learn decision was made.
type LearnArmStats struct {
	N    float64  `json:"n"`    // rewarded episodes
	Mean *float64 `json:"mean"` // null without any
}

// Contributes reports whether a step's messages and answer belong to the episode's
// history. A failed call (non-2xx, or broken off) is re-sent by the agent, so its
// messages reappear in the step that succeeds.
func (s *StepEvent) Contributes() bool {
	return s.Status/100 == 2 && s.Error == ""
}

// NewEventID returns a random event id: 80 bits as 20 hex digits. The bits come
// from math/rand/v2's generator (the runtime's ChaCha8, seeded from the OS): as
// unique as crypto/rand's, without a getrandom call per event (two a call). An id
// only tells events apart (readers drop duplicates by it); it guards nothing.
func NewEventID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	var h [20]byte // hex.EncodeToString's buffer would be a second allocation per id
	hex.Encode(h[:], b[:10])
	return string(h[:])
}

// ErrUnknownEvent is returned by Decode for a line of another type or version.
var ErrUnknownEvent = errors.New("unknown replay event")

// Decode parses one JSON line into *EpisodeEvent, *StepEvent, *RewardEvent or
// *LearnEvent. Every type but learn needs an episode_id.
func Decode(line []byte) (any, error) {
	if !gjson.ValidBytes(line) {
		return nil, fmt.Errorf("replay event is not valid JSON")
	}
	r := gjson.GetManyBytes(line, "v", "type", "episode_id")
	if r[0].Int() != Version {
		return nil, fmt.Errorf("%w: version %s", ErrUnknownEvent, r[0].Raw)
	}
	if r[2].String() == "" && r[1].String() != TypeLearn {
		return nil, fmt.Errorf("replay event has no episode_id")
	}
	var ev any
	switch r[1].String() {
	case TypeEpisode:
		ev = &EpisodeEvent{}
	case TypeStep:
		ev = &StepEvent{}
	case TypeReward:
		ev = &RewardEvent{}
	case TypeLearn:
		ev = &LearnEvent{}
	default:
		return nil, fmt.Errorf("%w: type %q", ErrUnknownEvent, r[1].String())
	}
	if err := json.Unmarshal(line, ev); err != nil {
		return nil, fmt.Errorf("replay event: %w", err)
	}
	return ev, nil
}
