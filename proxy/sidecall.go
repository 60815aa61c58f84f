package proxy

import (
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// sideCall is the step right after parse: a call that a side-call rule recognises (an
// agent's title, compaction or probe call; protocol.MatchSideCall) is relayed as the
// agent sent it — no episode, no arm, no augmenter call, no splice — and answered
// with X-CAM-Context: side-call. It reports whether it served the call.
//
// The session it belongs to, when found, is named in X-CAM-Episode-Id: the episode
// the call names, else the latest episode of the task it quotes (a title call quotes
// the user's request) or, failing that, of the task its own conversation holds (a
// compaction call resends the session). Found or not, nothing of it is recorded: a
// side call is no turn of the session's trajectory, which is what the learner and
// the trainer read.
func (s *Server) sideCall(fc *fasthttp.RequestCtx, rt *route, c *call) bool {
	sc, ok := protocol.MatchSideCall(c.run.SideCalls, c.req, fc.PostBody())
	if !ok {
		return false
	}
	c.span.End()
	s.m.SideCalls.WithLabelValues(sc.Reason).Inc()
	session := s.sideSession(fc, c.req, sc)
	s.log.Debug("side call relayed unaugmented", "reason", sc.Reason, "rule", sc.Rule, "episode", session, "model", c.req.Model)
	s.passthrough(fc, rt)
	h := &fc.Response.Header
	h.Set(hdrContext, "side-call")
	h.Set(hdrSideCall, sc.Reason)
	if session != "" {
		h.Set(hdrEpisode, session)
	}
	return true
}

// sideSession is the episode a side call belongs to, "" when none is known.
func (s *Server) sideSession(fc *fasthttp.RequestCtx, v *protocol.View, sc protocol.SideCall) string {
	if id := string(fc.Request.Header.Peek(hdrEpisode)); id != "" {
		if !episode.ValidID(id) {
			return ""
		}
		ctx, cancel := s.storeCtx()
		defer cancel()
		if _, err := s.episodes.Get(ctx, id); err == nil {
			return id
		}
		return ""
	}
	var tasks []string
	if id := string(fc.Request.Header.Peek(hdrTask)); id != "" {
		tasks = append(tasks, id)
	}
	for _, text := range []string{sc.Quoted, v.Task} {
		if text != "" {
			tasks = append(tasks, episode.TaskID(text))
		}
	}
	for _, t := range tasks {
		if id := s.sessions.get(t); id != "" {
			ctx, cancel := s.storeCtx()
			_, err := s.episodes.Get(ctx, id)
			cancel()
			if err == nil { // still live
				return id
			}
		}
	}
	return ""
}

// sessionIndex maps a task id to the latest episode opened for it in this process,
// for side calls to find their session by the request they quote. Bounded: when full
// it starts afresh (a side call then finds no session, and is relayed all the same).
type sessionIndex struct {
	mu sync.Mutex
	m  map[string]string
}

const maxSessionIndex = 1 << 14

func (x *sessionIndex) set(task, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil || len(x.m) >= maxSessionIndex {
		x.m = make(map[string]string)
	}
	x.m[task] = id
}

func (x *sessionIndex) get(task string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.m[task]
}
