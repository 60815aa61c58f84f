package proxy

import "github.com/camproxy/camproxy/replay"

// Turn is one finished call of an episode: what the replay buffer records.
type Turn = replay.Turn

// Recorder takes finished turns; *replay.Recorder is one. Record is called off the
// agent's critical path (after the answer was relayed) and must not block.
type Recorder interface {
	Record(t *replay.Turn)
}

// recorders gives each turn to every recorder in turn (the replay buffer, the
// dashboard's recent episodes).
type recorders []Recorder

func (rs recorders) Record(t *replay.Turn) {
	for _, r := range rs {
		r.Record(t)
	}
}
