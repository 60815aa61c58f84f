package proxy

import (
	"bytes"
	"context"
	"errors"
	"github.com/camproxy/camproxy/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// Inbound and outbound headers camproxy owns (DESIGN.md "Headers").
const (
	hdrEpisode = "X-CAM-Episode-Id"
	hdrTask    = "X-CAM-Task-Id"
	hdrArm     = "X-CAM-Arm"
	hdrSkip    = "X-CAM-Skip"
	hdrContext = "X-CAM-Context"
)

// storeTimeout bounds each episode-store call on the request path; a slow store is
// treated like a missing one (fail open).
const storeTimeout = 500 * time.Millisecond

// route is an augmented API: its protocol label, upstream, error shape and parser.
type route struct {
	proto string // metric label and the episode's protocol: openai, anthropic, bedrock
	up    *Upstream
	style Style
	// parse reads the body; errSkip means "a body this adapter does not understand":
	// it is forwarded untouched.
	parse func(fc *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error)
}

// errSkip marks a call camproxy forwards untouched because it cannot read its body.
var errSkip = errors.New("body not understood; forwarded untouched")

// serveAugmented runs the pipeline on one call of an augmented route.
func (s *Server) serveAugmented(fc *fasthttp.RequestCtx, rt *route) {
	start := time.Now()
	if !fc.IsPost() {
		s.fail(fc, rt, &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Msg: "method " + string(fc.Method()) + " is not allowed on " + string(fc.Path()) + "; use POST"})
		return
	}
	if string(fc.Request.Header.Peek(hdrSkip)) == "1" {
		s.passthrough(fc, rt.up)
		fc.Response.Header.Set(hdrContext, "skip")
		return
	}
	if ct := fc.Request.Header.ContentType(); !jsonContentType(ct) {
		s.fail(fc, rt, &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error",
			Msg: "Content-Type " + strconv.Quote(string(ct)) + " is not supported on " + string(fc.Path()) + "; send application/json"})
		return
	}
	body := fc.PostBody()
	run := s.rt.Load()
	req, err := rt.parse(fc, body, run.TaskRules)
	if errors.Is(err, errSkip) {
		s.passthrough(fc, rt.up)
		fc.Response.Header.Set(hdrContext, "skip")
		return
	}
	if err != nil {
		s.fail(fc, rt, badRequest("%v", err))
		return
	}
	sctx, span := s.startSpan(fc, rt, req.Parsed())
	c, e := s.beginTurn(fc, rt, run, req, start, sctx)
	if e != nil {
		span.SetStatus(codes.Error, e.Msg)
		span.End()
		s.fail(fc, rt, e)
		return
	}
	c.span = span
	propagate(sctx, s, fc)
	out := body
	if pl := run.placementFor(c.ep.Arm); c.ep.Context != "" && respliced(req.Parsed(), pl.Mode) {
		out = req.Splice(body, pl.Mode, strings.ReplaceAll(pl.Template, "{{context}}", c.ep.Context))
	}
	// Read before forwarding: once a stream starts, c belongs to the stream goroutine.
	id, arm, source := c.ep.ID, c.ep.Arm, c.source
	s.forward(fc, rt.up, out, true, rt.style, c)
	h := &fc.Response.Header
	h.Set(hdrEpisode, id)
	h.Set(hdrArm, arm)
	h.Set(hdrContext, source)
}

// respliced reports whether a call of a known episode gets the episode's context. A
// call that continues a provider-side conversation (previous_response_id) already has
// it there from the episode's first call; only instructions, which the provider does
// not carry over, need it again (System placement).
func respliced(v *protocol.View, mode protocol.Placement) bool {
	return v.Continues == "" || mode == protocol.System
}

// fail answers a call camproxy refuses, in the route's error shape.
func (s *Server) fail(fc *fasthttp.RequestCtx, rt *route, e *Error) {
	writeError(fc, rt.style, e)
	s.m.Requests.WithLabelValues(rt.proto, "", statusLabel(e.Status)).Inc()
}

func (run *Runtime) placementFor(arm string) Placement {
	if p, ok := run.ArmPlacement[arm]; ok {
		return p
	}
	return run.Placement
}

// beginTurn finds or starts the call's episode and, for a new one, its arm and context.
func (s *Server) beginTurn(fc *fasthttp.RequestCtx, rt *route, run *Runtime, r protocol.Request, start time.Time, sctx context.Context) (*chatCall, *Error) {
	req := r.Parsed()
	c := &chatCall{s: s, proto: rt.proto, req: req, dec: r.Decoder(), start: start, chain: episode.Chain(req.Messages)}
	if episode.HasSystem(req.Messages) {
		c.loose = episode.LooseChain(req.Messages)
	}
	id := string(fc.Request.Header.Peek(hdrEpisode))
	if id != "" && !episode.ValidID(id) {
		return nil, badRequest("%s must be 1-128 characters of A-Z a-z 0-9 . _ : - (got %d bytes)", hdrEpisode, len(id))
	}
	if ep, from, tip, ok := s.findEpisode(id, req, c.chain, c.loose); ok {
		c.ep, c.newFrom, c.index, c.claimed = ep, from, ep.Turns, tip
		c.source = "none"
		if ep.Context != "" {
			c.source = "episode"
		}
		s.m.Context.WithLabelValues(ep.Arm, c.source).Inc()
		return c, nil
	}
	if id == "" {
		id = episode.NewID()
	}
	taskID := string(fc.Request.Header.Peek(hdrTask))
	if taskID != "" && !episode.ValidID(taskID) {
		return nil, badRequest("%s must be 1-128 characters of A-Z a-z 0-9 . _ : - (got %d bytes)", hdrTask, len(taskID))
	}
	if taskID == "" {
		taskID = episode.TaskID(req.Task)
	}
	arm := run.Policy.Assign(id, taskID, string(fc.Request.Header.Peek(hdrArm)))
	text, source := "", "none"
	if req.Continues == "" {
		augStart := time.Now()
		text, source = s.resolveContext(sctx, run, arm.Name, arm.Augmenter, req, taskID)
		c.augment = time.Since(augStart)
		s.m.ContextDuration.WithLabelValues(arm.Name).Observe(c.augment.Seconds())
	} // else: the conversation began elsewhere (another camproxy, an expired episode):
	// its context, if any, is unknown, and new context would land mid-conversation.
	now := time.Now().UTC()
	ep := &episode.Episode{ID: id, TaskID: taskID, Task: req.Task, Arm: arm.Name, Context: text, ContextSource: source,
		Protocol: rt.proto, Model: req.Model, StartedAt: now, UpdatedAt: now}
	sctx, cancel := context.WithTimeout(s.base, storeTimeout)
	defer cancel()
	stored, created, err := s.episodes.Create(sctx, ep)
	switch {
	case err != nil:
		s.log.Warn("episode store unavailable; episode not persisted", "episode", id, "err", err)
		created = true
	case !created:
		// A concurrent first turn of the same episode won: use its arm and context.
		ep = stored
		source = "episode"
	}
	c.ep, c.isNew, c.source, c.index = ep, created, source, ep.Turns
	if created {
		s.m.Episodes.WithLabelValues(ep.Arm).Inc()
	}
	s.m.Context.WithLabelValues(ep.Arm, source).Inc()
	return c, nil
}

// findEpisode returns the episode a call continues: the one named by the header, else
// the one whose tip is the longest prefix of the call's messages. newFrom is the index
// of the first message the episode has not seen.
// A stitched call also returns the tip it claimed (nil for the header path).
// A call that continues a provider-side conversation (req.Continues) claims the tip of
// that response id instead of stitching by messages: all its messages are new.
func (s *Server) findEpisode(id string, req *protocol.View, chain, loose []uint64) (*episode.Episode, int, *uint64, bool) {
	ctx, cancel := context.WithTimeout(s.base, storeTimeout)
	defer cancel()
	msgs := req.Messages
	var from int
	var claimed *uint64
	if id == "" {
		tips, ends := episode.Candidates(msgs, chain)
		if loose != nil {
			// A resumed conversation whose system prompt changed: its loose tips,
			// looked at only when none of the strict ones is known.
			lt, le := episode.Candidates(msgs, loose)
			tips, ends = append(tips, lt...), append(ends, le...)
		}
		if req.Continues != "" {
			tips, ends = []uint64{episode.ResponseTip(req.Continues)}, []int{0}
		}
		if len(tips) == 0 {
			return nil, 0, nil, false
		}
		found, pos, ok, err := s.episodes.Claim(ctx, tips)
		if err != nil {
			s.log.Warn("episode stitching unavailable", "err", err)
		}
		if !ok {
			return nil, 0, nil, false
		}
		id, from, claimed = found, ends[pos], &tips[pos]
	}
	ep, err := s.episodes.Get(ctx, id)
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
func (s *Server) resolveContext(sctx context.Context, run *Runtime, arm, name string, req *protocol.View, taskID string) (string, string) {
	src, ok := run.Augmenters[name]
	if name == "none" || !ok {
		return "", "none"
	}
	if req.Task == "" {
		return "", "skip"
	}
	span := s.augmentSpan(sctx, name)
	defer span.End()
	ctx, cancel := context.WithTimeout(s.base, src.Timeout)
	defer cancel()
	ar := augment.Request{Task: req.Task, TaskID: taskID, Model: req.Model}
	text, how, err := s.cache.Get(ctx, augment.Key(src.Name, src.Version(), req.Task), func(ctx context.Context) (string, error) {
		return src.Augment(ctx, ar)
	})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(tracing.ContextSource.String("fail-open"))
		s.log.Warn("augmenter failed; forwarding unaugmented", "augmenter", name, "arm", arm, "err", err)
		return "", "fail-open"
	}
	span.SetAttributes(tracing.ContextSource.String(how.String()))
	return text, how.String()
}

// jsonContentType accepts a JSON media type, or none at all (curl -d, some SDKs).
func jsonContentType(ct []byte) bool {
	if len(ct) == 0 {
		return true
	}
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.ToLower(bytes.TrimSpace(mt))
	return bytes.Equal(mt, []byte("application/json")) || bytes.HasSuffix(mt, []byte("+json"))
}

// chatCall is one call's state; as the tee it decodes the answer while it is relayed.
type chatCall struct {
	s       *Server
	proto   string
	req     *protocol.View
	start   time.Time
	chain   []uint64
	loose   []uint64 // episode.LooseChain of the messages; nil when they have no system message
	ep      *episode.Episode
	isNew   bool
	newFrom int
	source  string
	augment time.Duration
	index   int     // turn index: completed turns before this one
	claimed *uint64 // the stitching tip this call claimed, released if it fails

	dec      protocol.Decoder
	body     bodyWriter // the relayed bytes on their way to dec, decoded of their Content-Encoding
	status   int        // the upstream's status, once its headers arrived
	advanced bool
	answer   protocol.Message
	usage    protocol.Usage
	span     trace.Span // the call's span (a no-op with tracing off)
}

func (c *chatCall) begin(status int, contentEncoding string) {
	c.status = status
	if status/100 == 2 {
		c.body = decodeBody(contentEncoding, c.dec)
	}
}

func (c *chatCall) chunk(p []byte) {
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

func (c *chatCall) done(status int, err error, ttfb time.Duration) {
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
		ctx, cancel := context.WithTimeout(s.base, storeTimeout)
		if rerr := s.episodes.Release(ctx, *c.claimed, c.ep.ID); rerr != nil {
			s.log.Warn("episode tip not released; a retry may start a new episode", "episode", c.ep.ID, "err", rerr)
		}
		cancel()
	}
	total := time.Since(c.start)
	s.m.Requests.WithLabelValues(c.proto, c.ep.Arm, statusLabel(status)).Inc()
	s.m.RequestDuration.WithLabelValues(c.proto, c.ep.Arm).Observe(total.Seconds())
	if c.usage.InputTokens > 0 || c.usage.OutputTokens > 0 {
		s.m.Tokens.WithLabelValues(c.ep.Arm, "input").Add(float64(c.usage.InputTokens))
		s.m.Tokens.WithLabelValues(c.ep.Arm, "output").Add(float64(c.usage.OutputTokens))
	}
	t := &Turn{Episode: *c.ep, NewEpisode: c.isNew, Index: c.index, Messages: c.req.Messages[min(c.newFrom, len(c.req.Messages)):],
		Response: c.answer, Usage: c.usage, Status: status, Augment: c.augment, TTFB: ttfb, Total: total, At: time.Now().UTC()}
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
func (c *chatCall) advance(answer protocol.Message) {
	c.advanced = true
	c.answer = answer
	var prev uint64
	if n := len(c.chain); n > 0 {
		prev = c.chain[n-1]
	}
	tip := episode.Extend(prev, &answer)
	ep := *c.ep
	ep.Turns++
	ep.History = len(c.req.Messages) + 1
	if c.req.Continues != "" {
		// Only the new messages were sent: the history grows by them and the answer.
		ep.History = c.ep.History + len(c.req.Messages) - min(c.newFrom, len(c.req.Messages)) + 1
	}
	ep.UpdatedAt = time.Now().UTC()
	ctx, cancel := context.WithTimeout(c.s.base, storeTimeout)
	defer cancel()
	if err := c.s.episodes.Update(ctx, &ep); err != nil {
		c.s.log.Warn("episode update failed", "episode", ep.ID, "err", err)
	}
	// The chain of a continued call's messages is not the conversation's: no tip.
	if c.req.Continues == "" {
		if err := c.s.episodes.SetTip(ctx, tip, ep.ID); err != nil {
			c.s.log.Warn("episode tip not stored; the next turn may start a new episode", "episode", ep.ID, "err", err)
		}
		if n := len(c.loose); n > 0 {
			if err := c.s.episodes.SetTip(ctx, episode.Extend(c.loose[n-1], &answer), ep.ID); err != nil {
				c.s.log.Warn("loose episode tip not stored; a resumed session may start a new episode", "episode", ep.ID, "err", err)
			}
		}
	}
	// A provider-side response id: a later call with previous_response_id claims it.
	if d, ok := c.dec.(protocol.Identified); ok {
		if rid := d.ResponseID(); rid != "" {
			if err := c.s.episodes.SetTip(ctx, episode.ResponseTip(rid), ep.ID); err != nil {
				c.s.log.Warn("response tip not stored; a call continuing it will start a new episode", "episode", ep.ID, "err", err)
			}
		}
	}
	c.ep = &ep
}
