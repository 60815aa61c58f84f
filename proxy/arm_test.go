package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/policies"
)

// TestArmOverride: an X-CAM-Arm naming no arm of an experiment that allows overrides
// is a 400 in the route's error shape listing the arms, before any augmenter or
// upstream call (it was hashed to an arm, so a typo went unnoticed); a valid one pins
// the arm; with overrides off the header is ignored, and the answer says so.
func TestArmOverride(t *testing.T) {
	arms := []policies.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}}
	for _, tt := range []struct {
		name           string
		allow          bool
		override       string
		status         int
		arm            string // the answer's X-CAM-Arm; "" = any (hashed)
		msg            string // the error's message
		ignored        bool   // X-CAM-Arm-Override: ignored
		augmenterCalls int64
	}{
		{name: "unknown arm", allow: true, override: "cma", status: 400,
			msg: `X-CAM-Arm: "cma" is not an arm of experiment "exp"; its arms: baseline, cam`},
		{name: "pinned", allow: true, override: "cam", status: 200, arm: "cam", augmenterCalls: 1},
		{name: "pinned to the arm without augmenter", allow: true, override: "baseline", status: 200, arm: "baseline"},
		{name: "no header", allow: true, status: 200},
		{name: "overrides off, unknown arm", allow: false, override: "cma", status: 200, ignored: true},
		{name: "overrides off, an arm", allow: false, override: "cam", status: 200, ignored: true},
		{name: "overrides off, no header", allow: false, status: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make(chan upstreamCall, 1)
			p := newInmemProxy(t, capture(calls, answerCompletion), true, func(o *Options, _ *fasthttp.Server) {
				pol, err := policies.New("exp", policies.StickyEpisode, tt.allow, arms)
				if err != nil {
					t.Fatal(err)
				}
				o.Runtime.Policy = pol
			})
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			var hdr []string
			if tt.override != "" {
				hdr = []string{hdrArm, tt.override}
			}
			if err := p.do(req, resp, []byte(taskBody), hdr...); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode() != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode(), tt.status, resp.Body())
			}
			h := &resp.Header
			if tt.status != 200 {
				body := resp.Body()
				if got := gjson.GetBytes(body, "error.message").String(); got != tt.msg {
					t.Errorf("error message %q, want %q", got, tt.msg)
				}
				if typ := gjson.GetBytes(body, "error.type").String(); typ != "invalid_request_error" {
					t.Errorf("error type %q; the OpenAI route answers its own shape: %s", typ, body)
				}
				if len(calls) != 0 {
					t.Error("the refused call reached the upstream")
				}
				if len(h.Peek(hdrEpisode)) != 0 {
					t.Errorf("a refused call got an episode: %s", h.Peek(hdrEpisode))
				}
			} else {
				<-calls
				if got := string(h.Peek(hdrArm)); tt.arm != "" && got != tt.arm || got == "" {
					t.Errorf("%s %q, want %q", hdrArm, got, tt.arm)
				}
			}
			if got, want := string(h.Peek(hdrOverride)), map[bool]string{true: "ignored"}[tt.ignored]; got != want {
				t.Errorf("%s %q, want %q", hdrOverride, got, want)
			}
			if n := p.aug.calls.Load(); n != tt.augmenterCalls && (tt.status != 200 || tt.arm != "") {
				t.Errorf("the augmenter was called %d times, want %d", n, tt.augmenterCalls)
			}
		})
	}
}
