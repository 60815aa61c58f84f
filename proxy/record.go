package proxy

import "github.com/camproxy/camproxy/episode"

// Recorder takes finished turns; *replay.Recorder is one. Record is called off the
// agent's critical path (after the answer was relayed) and must not block. t is the
// recorder's to read during the call: what it keeps, it copies (t is the call's own).
type Recorder interface {
	Record(t *episode.Turn)
}

// recorders gives each turn to every recorder in turn (the replay buffer, the
// dashboard's recent episodes).
type recorders []Recorder

func (rs recorders) Record(t *episode.Turn) {
	for _, r := range rs {
		r.Record(t)
	}
}
