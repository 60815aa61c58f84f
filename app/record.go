package app

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
)

// turnRecorder turns the data plane's finished turns into replay events. Building the
// events is cheap struct work; encoding and I/O happen on the recorder's goroutines.
type turnRecorder struct{ rec *replay.Recorder }

func (t turnRecorder) Record(tr *proxy.Turn) {
	ep := &tr.Episode
	if tr.NewEpisode {
		t.rec.Add(&replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: replay.NewEventID(),
			EpisodeID: ep.ID, TaskID: ep.TaskID, Task: ep.Task, Arm: ep.Arm, Context: ep.Context,
			ContextSource: ep.ContextSource, Protocol: ep.Protocol, Model: ep.Model, StartedAt: ep.StartedAt})
	}
	var resp *protocol.Message
	if tr.Response.Role != "" {
		r := tr.Response
		resp = &r
	}
	msgs := tr.Messages
	if msgs == nil {
		msgs = []protocol.Message{}
	}
	t.rec.Add(&replay.StepEvent{V: replay.Version, Type: replay.TypeStep, ID: replay.NewEventID(), EpisodeID: ep.ID,
		Turn: tr.Index, Messages: msgs, Response: resp, Usage: tr.Usage,
		Timing: replay.Timing{Augment: ms(tr.Augment.Seconds()), UpstreamTTFB: ms(tr.TTFB.Seconds()), Total: ms(tr.Total.Seconds())},
		Status: tr.Status, Error: tr.Error, At: tr.At})
}

// ms rounds seconds to milliseconds with microsecond precision.
func ms(s float64) float64 { return float64(int64(s*1e6)) / 1e3 }
