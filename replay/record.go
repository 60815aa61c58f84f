package replay

import (
	"time"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// Record takes a finished turn: the episode event when the turn opened its episode,
// then the step. Building the events is struct work on the caller's goroutine;
// encoding and I/O happen on the recorder's, and like Add it never blocks on them.
func (r *Recorder) Record(t *episode.Turn) {
	ep := &t.Episode
	if t.NewEpisode {
		r.Add(&EpisodeEvent{V: Version, Type: TypeEpisode, ID: NewEventID(),
			EpisodeID: ep.ID, TaskID: ep.TaskID, Task: ep.Task, Experiment: ep.Experiment, Arm: ep.Arm, Context: ep.Context,
			ContextSource: ep.ContextSource, Protocol: ep.Protocol, Model: ep.Model, StartedAt: ep.StartedAt})
	}
	// The step and its copy of the answer in one allocation.
	st := &struct {
		ev   StepEvent
		resp protocol.Message
	}{resp: t.Response}
	var resp *protocol.Message
	if t.Response.Role != "" {
		resp = &st.resp
	}
	msgs := t.Messages
	if msgs == nil {
		msgs = []protocol.Message{} // "messages": [], never null
	}
	st.ev = StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: ep.ID, Experiment: ep.Experiment,
		Turn: t.Index, Messages: msgs, Response: resp, AnswerTruncatedBytes: t.AnswerTruncated, Usage: t.Usage,
		Timing: Timing{Augment: ms(t.Augment), UpstreamTTFB: ms(t.TTFB), Total: ms(t.Total)},
		Status: t.Status, Error: t.Error, At: t.At, Transport: stepTransport(t.Transport)}
	r.Add(&st.ev)
}

// ms is d in milliseconds with microsecond precision, as steps record timings.
func ms(d time.Duration) float64 { return float64(int64(d.Seconds()*1e6)) / 1e3 }

// stepTransport is a step's transport field: absent for HTTP, the transport every
// step had before WebSocket mode (readers of older files read them the same).
func stepTransport(t string) string {
	if t == episode.TransportHTTP {
		return ""
	}
	return t
}
