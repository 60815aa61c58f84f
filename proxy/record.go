package proxy

import "github.com/camproxy/camproxy/replay"

// Turn is one finished call of an episode: what the replay buffer records.
type Turn = replay.Turn

// Recorder takes finished turns; *replay.Recorder is one. Record is called off the
// agent's critical path (after the answer was relayed) and must not block.
type Recorder interface {
	Record(t *replay.Turn)
}

type nopRecorder struct{}

func (nopRecorder) Record(*replay.Turn) {}
