package proxy

import (
	"time"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// Turn is one finished call of an episode: what the replay buffer records.
type Turn struct {
	Episode    episode.Episode    // the episode as it stands after this turn
	NewEpisode bool               // this call started the episode
	Index      int                // the turn's position in the episode, from 0
	Messages   []protocol.Message // messages new since the episode's previous turn
	Response   protocol.Message   // the answer; empty when the call failed
	Usage      protocol.Usage
	Status     int    // HTTP status relayed to the agent (499: the agent went away)
	Error      string // why the call failed, if it did
	Augment    time.Duration
	TTFB       time.Duration
	Total      time.Duration
	At         time.Time
}

// Recorder takes finished turns. Record is called off the agent's critical path (after
// the answer was relayed) and must not block.
type Recorder interface {
	Record(t *Turn)
}

type nopRecorder struct{}

func (nopRecorder) Record(*Turn) {}
