package proxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/tracing"
)

// Inbound and outbound headers camproxy owns (DESIGN.md "Headers").
const (
	hdrEpisode = "X-CAM-Episode-Id"
	hdrTask    = "X-CAM-Task-Id"
	hdrArm     = "X-CAM-Arm"
	// hdrOverride answers "ignored" to a call that sent X-CAM-Arm to an experiment
	// whose allow_override is off, so the header's doing nothing is seen.
	hdrOverride = "X-CAM-Arm-Override"
	hdrSkip     = "X-CAM-Skip"
	hdrContext  = "X-CAM-Context"
	// hdrSideCall names the kind of a side call camproxy relayed unaugmented.
	hdrSideCall = "X-CAM-Side-Call"
	// hdrAgent names the calling agent (match.agents); hdrExperiment, inbound, asks
	// for an experiment (honoured where it allows overrides) and, outbound, names the
	// one that took the call; hdrExperimentOverride answers "ignored" as hdrOverride does.
	hdrAgent              = "X-CAM-Agent"
	hdrExperiment         = "X-CAM-Experiment"
	hdrExperimentOverride = "X-CAM-Experiment-Override"
)

// The answer headers every augmented call gets, as fasthttp writes their names
// (normalized; TestWireHeaderNames): setAnswerHeader sets them without normalizing
// the name again on every call.
const (
	wireEpisode    = "X-Cam-Episode-Id"
	wireExperiment = "X-Cam-Experiment"
	wireArm        = "X-Cam-Arm"
	wireContext    = "X-Cam-Context"
)

// setAnswerHeader sets the answer header name (a wire* constant) to value, as
// h.Set does: SetCanonical copies both and drops newlines from the value.
func setAnswerHeader(h *fasthttp.ResponseHeader, name, value string) {
	h.SetCanonical(unsafe.Slice(unsafe.StringData(name), len(name)), unsafe.Slice(unsafe.StringData(value), len(value)))
}

// storeTimeout bounds each episode-store call on the request path; a slow store is
// treated like a missing one (fail open).
const storeTimeout = 500 * time.Millisecond

// storeCtx is the context of one episode-store call: storeTimeout, unless the store is
// in this process (episode.Memory), which never waits and needs no timer.
func (s *Server) storeCtx() (context.Context, context.CancelFunc) {
	if l, ok := s.episodes.(interface{ Local() bool }); ok && l.Local() {
		return s.base, noCancel
	}
	return context.WithTimeout(s.base, storeTimeout)
}

func noCancel() {}

// serveAugmented is the pipeline of DESIGN.md, one named step per line: parse the
// call and choose its experiment, relay a side call as it came (sideCall), find or
// start its episode, assign a new episode's arm and context, splice the context in,
// forward and relay the answer; record runs when the answer has ended (call.done,
// called by the relay).
func (s *Server) serveAugmented(fc *fasthttp.RequestCtx, rt *route) {
	c, e := s.parse(fc, rt)
	switch {
	case e == nil:
	case e.Err == registry.ErrPass:
		s.passthrough(fc, rt)
		fc.Response.Header.Set(hdrContext, "skip")
		return
	case e.Err == ErrNoExperiment:
		// No experiment takes the call and none is the default: relayed as it came,
		// unrecorded, and answered without a header of camproxy's.
		s.passthrough(fc, rt)
		return
	default:
		s.fail(fc, rt, e)
		return
	}
	if s.sideCall(fc, rt, c) {
		return
	}
	if e := c.episode(fc); e != nil {
		c.span.SetStatus(codes.Error, e.Msg)
		c.span.End()
		s.fail(fc, rt, e)
		return
	}
	if c.isNew {
		if e := c.arm(fc); e != nil {
			c.span.SetStatus(codes.Error, e.Msg)
			c.span.End()
			s.fail(fc, rt, e)
			return
		}
		c.context()
		c.open()
	}
	c.series = s.stats.routeSeries(s.m, rt, c.x.Name, c.ep.Arm, c.transport)
	c.series.contextServed(c.source)
	out, buf := c.splice(fc.PostBody())
	if buf != nil {
		// Spliced: the received body is needed no more (the view holds none of it), and
		// a large one is let go now rather than held through the whole call.
		fc.Request.ReleaseBody(maxPooledBody)
	}
	propagate(c.sctx, s, fc)
	// Read before forwarding: once a stream starts, c belongs to the relay.
	id, arm, source, x, xIgnored := c.ep.ID, c.ep.Arm, c.source, c.x.Name, c.xIgnored
	ignored := len(fc.Request.Header.Peek(hdrArm)) > 0 && !c.x.Policy.AllowOverride()
	s.forward(fc, rt.up, out, true, rt.Protocol, c) // c.done records the turn
	s.putSpliceBuf(buf)                             // written upstream by now
	h := &fc.Response.Header
	setAnswerHeader(h, wireEpisode, id)
	setAnswerHeader(h, wireExperiment, x)
	setAnswerHeader(h, wireArm, arm)
	setAnswerHeader(h, wireContext, source)
	if ignored {
		h.Set(hdrOverride, "ignored")
	}
	if xIgnored {
		h.Set(hdrExperimentOverride, "ignored")
	}
}

// parse is step 1: the call's method, opt-out header and media type, then the
// experiment that takes it (experiment) and its body read by the route's protocol with
// that experiment's task rules. registry.ErrPass: forward the call untouched;
// ErrNoExperiment: forward it untouched and answer it without X-CAM-* headers.
func (s *Server) parse(fc *fasthttp.RequestCtx, rt *route) (*call, *Error) {
	start := time.Now()
	if !fc.IsPost() {
		return nil, &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Msg: "method " + string(fc.Method()) + " is not allowed on " + string(fc.Path()) + "; use POST"}
	}
	if string(fc.Request.Header.Peek(hdrSkip)) == "1" {
		return nil, &Error{Err: registry.ErrPass}
	}
	if ct := fc.Request.Header.ContentType(); !jsonContentType(ct) {
		return nil, &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error",
			Msg: "Content-Type " + strconv.Quote(string(ct)) + " is not supported on " + string(fc.Path()) + "; send application/json"}
	}
	run := s.rt.Load()
	ch, e := experiment(fc, rt, run)
	if e != nil {
		return nil, e
	}
	r := ch.Request
	req := r.Parsed()
	c := &call{s: s, rt: rt, run: run, x: ch.Experiment, xIgnored: ch.Ignored, r: r, req: req, dec: r.Decoder(), start: start, transport: episode.TransportHTTP}
	if fc.UserValue(wsSessionKey) != nil {
		c.transport = episode.TransportWebSocket
	}
	c.dec.Limit(s.maxAnswer) // the recorded copy only: the relay is not the decoder's
	c.sctx, c.span = s.startSpan(fc, rt, req)
	return c, nil
}

// experiment is step 1's choice of the experiment that takes the call (Choose: the
// first whose match holds, X-CAM-Experiment where it allows overrides), with the call's
// body read by its task rules.
func experiment(fc *fasthttp.RequestCtx, rt *route, run *Runtime) (Choice, *Error) {
	ch, err := Choose(run.Experiments, rt.Protocol, fcCall{fc}, fc.PostBody())
	switch {
	case err == nil:
		return ch, nil
	case errors.Is(err, registry.ErrPass):
		return ch, &Error{Err: registry.ErrPass}
	case errors.Is(err, ErrNoExperiment):
		return ch, &Error{Err: ErrNoExperiment}
	default: // the body, or an X-CAM-Experiment naming no experiment
		return ch, badRequest("%v", err)
	}
}

// fail answers a call camproxy refuses, in the route's error shape.
func (s *Server) fail(fc *fasthttp.RequestCtx, rt *route, e *Error) {
	writeError(fc, rt.Errors, e)
	s.m.Requests.WithLabelValues(rt.Name, "", "", statusLabel(e.Status)).Inc()
}

// episode is step 2: the episode the call continues (named by header, or stitched by
// its messages), or a new one's id and task.
func (c *call) episode(fc *fasthttp.RequestCtx) *Error {
	req := c.req
	id := string(fc.Request.Header.Peek(hdrEpisode))
	if id != "" && !episode.ValidID(id) {
		return badRequest("%s must be 1-128 characters of A-Z a-z 0-9 . _ : - (got %d bytes)", hdrEpisode, len(id))
	}
	taskID := string(fc.Request.Header.Peek(hdrTask))
	if taskID != "" && !episode.ValidID(taskID) {
		return badRequest("%s must be 1-128 characters of A-Z a-z 0-9 . _ : - (got %d bytes)", hdrTask, len(taskID))
	}
	// The experiment and a declared task scope stitching: two experiments' calls, and
	// runs of two tasks, that open alike stay apart.
	c.chain, c.loose = episode.Chains(req, c.x.Name, taskID)
	if ep, from, tip, ok := c.s.findEpisode(id, req, c.chain, c.loose, &c.stored); ok {
		c.ep, c.newFrom, c.index, c.claimed = ep, from, ep.Turns, tip
		// A known episode keeps the experiment it started on (one named by its id may
		// have started on another), while the runtime still has it.
		if x := c.run.experiment(ep.Experiment); x != nil {
			c.x = x
		}
		c.source = "none"
		if ep.Context != "" {
			c.source = "episode"
		}
		return nil
	}
	if id == "" {
		id = episode.NewID()
	}
	if taskID == "" {
		taskID = episode.TaskID(req.Task)
	}
	now := time.Now().UTC()
	c.ep = &episode.Episode{ID: id, TaskID: taskID, Task: req.Task, Experiment: c.x.Name, Protocol: c.rt.Name, Model: req.Model, StartedAt: now, UpdatedAt: now}
	c.isNew = true
	return nil
}

// arm is step 3: a new episode's arm, from the experiment's policy (X-CAM-Arm pins it
// where the experiment allows overrides). An X-CAM-Arm naming no arm is refused
// before any augmenter is called: hashed to an arm, a typo went unnoticed.
func (c *call) arm(fc *fasthttp.RequestCtx) *Error {
	a, err := c.x.Policy.Assign(c.ep.ID, c.ep.TaskID, string(fc.Request.Header.Peek(hdrArm)))
	if err != nil {
		return badRequest("%s: %v", hdrArm, err)
	}
	c.ep.Arm, c.augmenter = a.Name, a.Augmenter
	return nil
}

// context is step 4: a new episode's context from its arm's augmenter, through the
// cache, fail-open. A call that continues a provider-side conversation begun
// elsewhere gets none: its context, if any, is unknown, and new context would land
// mid-conversation.
func (c *call) context() {
	c.source = "none"
	if c.req.Continues != "" {
		return
	}
	augStart := time.Now()
	c.ep.Context, c.source = c.s.resolveContext(c.sctx, c.x, c.ep.Arm, c.augmenter, c.req, c.ep.TaskID)
	c.augment = time.Since(augStart)
	c.s.m.ContextDuration.WithLabelValues(c.x.Name, c.ep.Arm).Observe(c.augment.Seconds())
}

// open stores a new episode. A concurrent first turn of the same episode (same
// X-CAM-Episode-Id) may have won: this call then takes its arm and context.
func (c *call) open() {
	c.ep.ContextSource = c.source
	ctx, cancel := c.s.storeCtx()
	defer cancel()
	stored, created, err := c.s.episodes.Create(ctx, c.ep)
	switch {
	case err != nil:
		c.s.log.Warn("episode store unavailable; episode not persisted", "episode", c.ep.ID, "err", err)
		created = true
	case !created:
		c.ep, c.source = stored, "episode"
	}
	c.isNew, c.index = created, c.ep.Turns
	if created {
		c.s.sessions.set(c.ep.TaskID, c.ep.ID)
		c.s.m.Episodes.WithLabelValues(c.x.Name, c.ep.Arm).Inc()
		c.s.stats.episodeStarted(c.x.Name, c.ep.Arm)
	}
}

// splice is step 5: the episode's context placed as its arm says. A call that
// continues a provider-side conversation has it there already, except in
// instructions, which the provider does not carry over. The spliced body is written
// into buf, a buffer of the server's (nil when nothing is spliced: out is body).
func (c *call) splice(body []byte) (out []byte, buf *[]byte) {
	pl := c.x.placementFor(c.ep.Arm)
	if c.ep.Context == "" || !respliced(c.req, pl.Mode) {
		return body, nil
	}
	text := strings.ReplaceAll(pl.Template, "{{context}}", c.ep.Context)
	buf = c.s.spliceBuf(len(body) + len(text) + len(text)/8 + 64) // escaping grows the text a little
	*buf = c.r.SpliceTo((*buf)[:0], body, pl.Mode, text)
	return *buf, buf
}

// respliced reports whether a call of a known episode gets the episode's context. A
// call that continues a provider-side conversation (previous_response_id) already has
// it there from the episode's first call; only instructions, which the provider does
// not carry over, need it again (System placement).
func respliced(v *protocol.View, mode protocol.Placement) bool {
	return v.Continues == "" || mode == protocol.System
}

func (x *Experiment) placementFor(arm string) Placement {
	if p, ok := x.ArmPlacement[arm]; ok {
		return p
	}
	return x.Placement
}

// findEpisode returns the episode a call continues: the one named by the header, else
// the one whose tip is the longest prefix of the call's messages. newFrom is the index
// of the first message the episode has not seen.
// A stitched call also returns the tip it claimed (nil for the header path).
// A call that continues a provider-side conversation (req.Continues) claims the tip of
// that response id instead of stitching by messages: all its messages are new.
// dst is the call's room for the episode, used when the store reads into it (getInto).
func (s *Server) findEpisode(id string, req *protocol.View, chain, loose []uint64, dst *episode.Episode) (*episode.Episode, int, *uint64, bool) {
	ctx, cancel := s.storeCtx()
	defer cancel()
	msgs := req.Messages
	var from int
	var claimed *uint64
	if id == "" {
		var ok bool
		if id, from, claimed, ok = s.stitch(ctx, req, chain, loose); !ok {
			return nil, 0, nil, false
		}
	}
	ep, err := s.getEpisode(ctx, id, dst)
	if err != nil {
		if !errors.Is(err, episode.ErrNotFound) {
			s.log.Warn("episode store unavailable", "episode", id, "err", err)
		}
		return nil, 0, nil, false
	}
	switch {
	case req.Continues != "":
		from = continuedFrom(msgs)
	case from == 0:
		from = min(ep.History, len(msgs))
	}
	return ep, from, claimed, true
}

// getInto is a Store that reads an episode into the caller's storage
// (episode.Memory): the one Get of every call of a known episode, without the copy's
// allocation.
type getInto interface {
	GetInto(ctx context.Context, id string, dst *episode.Episode) error
}

// getEpisode is the store's Get, into dst when the store reads into the caller's
// storage (getInto); the episode returned is then dst.
func (s *Server) getEpisode(ctx context.Context, id string, dst *episode.Episode) (*episode.Episode, error) {
	if g, ok := s.episodes.(getInto); ok {
		if err := g.GetInto(ctx, id, dst); err != nil {
			return nil, err
		}
		return dst, nil
	}
	return s.episodes.Get(ctx, id)
}

// stitch claims the tip of a header-less call: the episode it continues, the end of
// the prefix that tip hashes, and the tip.
func (s *Server) stitch(ctx context.Context, req *protocol.View, chain, loose []uint64) (string, int, *uint64, bool) {
	msgs := req.Messages
	n := episode.Answers(msgs)
	if loose != nil {
		n *= 2
	}
	tips, ends := episode.AppendCandidates(make([]uint64, 0, n), make([]int, 0, n), msgs, chain)
	if loose != nil {
		// A resumed conversation whose system prompt changed: its loose tips,
		// looked at only when none of the strict ones is known.
		tips, ends = episode.AppendCandidates(tips, ends, msgs, loose)
	}
	if req.Continues != "" {
		tips, ends = []uint64{episode.ResponseTip(req.Continues)}, []int{0}
	}
	if len(tips) == 0 {
		return "", 0, nil, false
	}
	id, pos, ok, err := s.episodes.Claim(ctx, tips)
	if err != nil {
		s.log.Warn("episode stitching unavailable", "err", err)
	}
	if err == nil && req.Continues == "" && (!ok || ends[pos] < ends[0]) {
		// No tip continues the call up to its last answer: an answer past the tip
		// found may be one whose recorded copy was cut, known by its sketch.
		after := 0
		if ok {
			after = ends[pos]
		}
		if sid, st, se, spos, sok := s.claimSketch(ctx, msgs, chain, loose, after); sok {
			if ok && sid != id {
				// The longer prefix wins; the other episode's claim is given back.
				if err := s.episodes.Release(ctx, tips[pos], id); err != nil {
					s.log.Warn("episode tip not released; a retry may start a new episode", "episode", id, "err", err)
				}
			}
			id, tips, ends, pos, ok = sid, st, se, spos, true
		}
	}
	if !ok {
		return "", 0, nil, false
	}
	return id, ends[pos], &tips[pos], true
}

// claimSketch claims the sketch tip (episode.SketchTip) of an answer of msgs past
// msgs[:after], longest prefix first, strict then loose, as stitch claims chain tips.
func (s *Server) claimSketch(ctx context.Context, msgs []protocol.Message, chain, loose []uint64, after int) (id string, tips []uint64, ends []int, pos int, ok bool) {
	tips, ends = episode.SketchCandidates(msgs, chain, after)
	if loose != nil {
		lt, le := episode.SketchCandidates(msgs, loose, after)
		tips, ends = append(tips, lt...), append(ends, le...)
	}
	if len(tips) == 0 {
		return "", nil, nil, 0, false
	}
	id, pos, ok, err := s.episodes.Claim(ctx, tips)
	if err != nil {
		s.log.Warn("episode stitching unavailable", "err", err)
	}
	return id, tips, ends, pos, ok
}

// continuedFrom is the first new message of a call that continues a provider-side
// conversation: everything but the system prompt (instructions), which is re-sent
// with each call and was recorded with the episode's first turn.
func continuedFrom(msgs []protocol.Message) int {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		return 1
	}
	return 0
}

// resolveContext gets a new episode's context: cache, then the augmenter, all within
// the augmenter's deadline. Any failure is fail-open: no context, never a failed call.
func (s *Server) resolveContext(sctx context.Context, x *Experiment, arm, name string, req *protocol.View, taskID string) (string, string) {
	src, ok := x.Augmenters[name]
	if name == "none" || !ok {
		return "", "none"
	}
	if req.Task == "" {
		return "", "skip"
	}
	key := augment.Key(src.Name, src.Version(), req.Task)
	span := s.augmentSpan(sctx, name)
	defer span.End()
	if lc, ok := s.cache.(localCache); ok {
		// Most contexts are in the local tier: served without a deadline's timer and
		// context, or a load function, which a call that waits for nothing needs not.
		if text, ok := lc.Cached(key); ok {
			if span.IsRecording() { // the attributes' slice is made only for a span that keeps it
				span.SetAttributes(tracing.ContextSource.String(augment.Hit.String()))
			}
			return text, augment.Hit.String()
		}
	}
	text, how, err := s.loadContext(src, key, augment.Request{Task: req.Task, TaskID: taskID, Model: req.Model})
	if errors.Is(err, errShed) {
		span.SetAttributes(tracing.ContextSource.String("shed"))
		return "", "shed"
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(tracing.ContextSource.String("fail-open"))
		s.log.Warn("augmenter failed; forwarding unaugmented", "augmenter", name, "arm", arm, "err", err)
		return "", "fail-open"
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.ContextSource.String(how.String()))
	}
	return text, how.String()
}

// loadContext gets a context the local tier does not hold: through the cache, within
// the augmenter's deadline. A function of its own, so that what its load closure
// captures is moved to the heap only on this path, not on every lookup.
func (s *Server) loadContext(src ContextSource, key string, ar augment.Request) (string, augment.Source, error) {
	ctx, cancel := context.WithTimeout(s.base, src.Timeout)
	defer cancel()
	return s.cache.Get(ctx, key, func(ctx context.Context) (string, error) {
		if s.limit.pressed() {
			return "", errShed // near the admission limit: camproxy's own extras go first
		}
		return src.Augment(ctx, ar)
	})
}

// localCache is a ContextCache with a local tier to read without loading
// (augment.Cache).
type localCache interface {
	Cached(key string) (string, bool)
}

// jsonContentType accepts a JSON media type, or none at all (curl -d, some SDKs).
func jsonContentType(ct []byte) bool {
	if len(ct) == 0 {
		return true
	}
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.TrimSpace(mt)
	return bytes.EqualFold(mt, []byte("application/json")) ||
		len(mt) >= 5 && bytes.EqualFold(mt[len(mt)-5:], []byte("+json"))
}

// call is one call's state through the pipeline; as the relay's tee it decodes the
// answer while it is relayed, and its done is step 7, record.
type call struct {
	s   *Server
	rt  *route
	run *Runtime // read once, at the call's start: a reload does not change a call midway
	// x is the call's experiment, one of run's: the one that took it, or the one its
	// episode started on. xIgnored: X-CAM-Experiment asked for one that allows no override.
	x        *Experiment
	xIgnored bool
	r        protocol.Request
	req      *protocol.View
	sctx     context.Context // the call span's context
	span     trace.Span      // the call's span (a no-op with tracing off)

	start     time.Time
	transport string // episode.TransportHTTP or episode.TransportWebSocket
	chain     []uint64
	loose     []uint64 // episode.LooseChain of the messages; nil when they have no system message
	ep        *episode.Episode
	stored    episode.Episode // a known episode as the store read it into the call (getEpisode)
	isNew     bool
	newFrom   int
	augmenter string // a new episode's arm's augmenter
	source    string
	augment   time.Duration
	index     int         // turn index: completed turns before this one
	claimed   *uint64     // the stitching tip this call claimed, released if it fails
	series    *callSeries // its metrics' series, once its arm is known

	dec      protocol.Decoder
	body     bodyWriter   // the relayed bytes on their way to dec, decoded of their Content-Encoding
	ident    identityBody // body of an identity answer (no allocation)
	status   int          // the upstream's status, once its headers arrived
	advanced bool
	next     episode.Episode // the episode past this turn, once advanced (c.ep then points here)
	tips     [3]uint64       // the tips advance sets: strict, loose, response id
	answer   protocol.Message
	usage    protocol.Usage
	turn     episode.Turn // what done hands the recorders
}

func (c *call) begin(status int, contentEncoding string) {
	c.status = status
	switch {
	case status/100 != 2:
	case contentEncoding == "": // the common case, without an allocation
		c.ident = identityBody{c.dec}
		c.body = &c.ident
	default:
		c.body = decodeBody(contentEncoding, c.dec)
	}
}

func (c *call) chunk(p []byte) {
	if c.body == nil {
		return
	}
	_, _ = c.body.Write(p)
	// Advance the episode before the final chunk reaches the agent: its next turn may
	// arrive the moment it has read this one, and must find the new tip.
	if !c.advanced && c.dec.Finished() {
		c.advance(c.dec.Message())
	}
}

func (c *call) done(status int, err error, ttfb time.Duration) {
	s := c.s
	var bodyErr error
	if c.body != nil {
		bodyErr = c.body.Close() // after it, the decoding goroutine (if any) has ended
	}
	c.usage = c.dec.Usage()
	if errors.Is(err, errClientGone) {
		status = 499
	}
	if c.claimed != nil && !c.advanced {
		ctx, cancel := s.storeCtx()
		if rerr := s.episodes.Release(ctx, *c.claimed, c.ep.ID); rerr != nil {
			s.log.Warn("episode tip not released; a retry may start a new episode", "episode", c.ep.ID, "err", rerr)
		}
		cancel()
	}
	now := time.Now()
	total := now.Sub(c.start)
	m := c.series
	if m == nil {
		m = s.stats.routeSeries(s.m, c.rt, c.x.Name, c.ep.Arm, c.transport)
	}
	m.request(status)
	m.turns.Inc()
	m.duration.Observe(total.Seconds())
	if c.usage.InputTokens > 0 || c.usage.OutputTokens > 0 {
		m.tokens(c.usage.InputTokens, c.usage.OutputTokens)
	}
	// The turn lives in the call, which is on the heap already: one allocation fewer.
	t := &c.turn
	*t = episode.Turn{Episode: *c.ep, NewEpisode: c.isNew, Index: c.index, Messages: c.req.Messages[min(c.newFrom, len(c.req.Messages)):],
		Response: c.answer, AnswerTruncated: c.dec.Truncated(), Usage: c.usage, Status: status, Augment: c.augment, TTFB: ttfb, Total: total, At: now.UTC(), Transport: c.transport}
	switch {
	case err != nil:
		t.Error = err.Error()
	case !c.advanced && bodyErr != nil:
		t.Error = "answer not recorded: " + bodyErr.Error()
	case !c.advanced && status/100 == 2:
		t.Error = "answer incomplete: the upstream's response ended before its final event"
	}
	s.rec.Record(t)
	if c.span != nil {
		endSpan(c.span, c, status, err)
	}
}

// advance moves the episode past this turn: the history now ends with the answer, and
// its hash becomes the episode's tip for stitching the next call.
func (c *call) advance(answer protocol.Message) {
	c.advanced = true
	c.answer = answer
	c.next = *c.ep // the call's own copy (advance runs once per call): no allocation
	ep := &c.next
	ep.Turns++
	ep.History = len(c.req.Messages) + 1
	if c.req.Continues != "" {
		// Only the new messages were sent: the history grows by them and the answer.
		ep.History = c.ep.History + len(c.req.Messages) - min(c.newFrom, len(c.req.Messages)) + 1
	}
	ep.UpdatedAt = time.Now().UTC()
	// The episode and the tips the next call finds it by, in one store call.
	tips := c.tips[:0] // in the call, on the heap already: through the interface a local array would escape
	// The chain of a continued call's messages is not the conversation's: no tip.
	if c.req.Continues == "" {
		tips = c.appendTips(tips, &answer)
	}
	// A provider-side response id: a later call with previous_response_id claims it.
	if d, ok := c.dec.(protocol.Identified); ok {
		if rid := d.ResponseID(); rid != "" {
			tips = append(tips, episode.ResponseTip(rid))
		}
	}
	ctx, cancel := c.s.storeCtx()
	defer cancel()
	if err := c.s.episodes.Advance(ctx, ep, tips...); err != nil {
		c.s.log.Warn("episode not advanced; its next turn may start a new episode", "episode", ep.ID, "err", err)
	}
	c.ep = ep
}

// appendTips appends the tips the next call finds the episode by: the history's
// chain hashes (strict, and loose when it has a system message) extended by the
// answer; for an answer whose recorded copy was cut, whose hash the whole one the
// agent sends back does not share, extended by its sketch instead (episode.SketchTip).
func (c *call) appendTips(tips []uint64, answer *protocol.Message) []uint64 {
	var sk *protocol.Sketch
	if c.dec.Truncated() > 0 {
		if sk = c.dec.Sketch(); sk == nil {
			return tips
		}
	}
	var dg uint64 // the answer's digest, hashed once for both chains
	if sk == nil {
		dg = episode.Digest(answer)
	}
	tip := func(chain []uint64) uint64 {
		var prev uint64
		if n := len(chain); n > 0 {
			prev = chain[n-1]
		}
		if sk != nil {
			return episode.SketchTip(prev, sk)
		}
		return episode.ExtendBy(prev, dg)
	}
	tips = append(tips, tip(c.chain))
	if len(c.loose) > 0 {
		tips = append(tips, tip(c.loose))
	}
	return tips
}
