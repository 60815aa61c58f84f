package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestAnswerCapRecorded: replay.max_answer_bytes reaches the data plane. A streamed
// answer past it reaches the agent whole, while its step records the first bytes and
// says how many it lacks, with the usage of the whole answer.
func TestAnswerCapRecorded(t *testing.T) {
	t.Parallel() // its own camproxy; its 66 KB stream overlaps the agent tests' waits
	const limit = 2 << 10
	e := newEnv(t, func(c *config.Config) { c.Replay.MaxAnswerBytes = limit })
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 1500) // 66 KB
	e.up.Configure(func(u *testkit.Upstream) {
		u.Reply = func(gjson.Result) testkit.Reply { return testkit.Reply{Content: long} }
	})
	resp, body := e.post(newAgent("write at length", false).body(`,"stream":true,"stream_options":{"include_usage":true}`), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got strings.Builder
	for line := range bytes.Lines(body) {
		if d, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: ")); ok {
			got.WriteString(gjson.GetBytes(d, "choices.0.delta.content").Str)
		}
	}
	if got.String() != long {
		t.Fatalf("the agent got %d bytes of text, the upstream sent %d", got.Len(), len(long))
	}
	steps := recordedSteps(t, e)
	if len(steps) != 1 || steps[0].Response == nil {
		t.Fatalf("steps: %s", describeSteps(steps))
	}
	s := steps[0]
	kept := s.Response.Content
	if len(kept) == 0 || len(kept) > limit || !strings.HasPrefix(long, kept) {
		t.Fatalf("the step kept %d bytes (limit %d), a prefix: %v", len(kept), limit, strings.HasPrefix(long, kept))
	}
	if s.AnswerTruncatedBytes < int64(len(long)-limit) || s.Error != "" || s.Usage.OutputTokens != 7 {
		t.Fatalf("answer_truncated_bytes %d (want ≥ %d), error %q, usage %+v", s.AnswerTruncatedBytes, len(long)-limit, s.Error, s.Usage)
	}
}
