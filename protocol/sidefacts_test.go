package protocol

import (
	"regexp"
	"testing"

	"github.com/tidwall/gjson"
)

// TestReadSideFacts pins the one-pass read of the cheap conditions to what the
// per-path gjson reads found: every wire API's spelling, the first of a repeated key,
// a cap that is not a number skipped for the next spelling.
func TestReadSideFacts(t *testing.T) {
	for _, tc := range []struct {
		body   string
		tools  bool
		max    int64
		hasMax bool
	}{
		{`{"model":"m","messages":[]}`, false, 0, false},
		{`{"tools":[{"type":"function"}],"max_tokens":1}`, true, 1, true},
		{`{"tools":[],"max_tokens":"1"}`, false, 0, false},
		{`{"tools":null}`, false, 0, false},
		{`{"toolConfig":{"tools":[{"toolSpec":{}}]},"inferenceConfig":{"maxTokens":7}}`, true, 7, true},
		{`{"input":[{"type":"message"},{"type":"additional_tools","tools":[]}],"max_output_tokens":16}`, true, 16, true},
		{`{"input":"hi","max_completion_tokens":3}`, false, 3, true},
		{`{"max_completion_tokens":3,"max_tokens":2}`, false, 2, true},
		{`{"max_tokens":5,"max_tokens":9}`, false, 5, true},
		{`{"max_tokens":"x","max_output_tokens":4}`, false, 4, true},
	} {
		f := ReadSideFacts([]byte(tc.body))
		if f.tools != tc.tools || f.maxTokens != tc.max || f.hasMax != tc.hasMax {
			t.Errorf("%s: tools %v, max %d %v; want %v, %d %v", tc.body, f.tools, f.maxTokens, f.hasMax, tc.tools, tc.max, tc.hasMax)
		}
	}
}

// TestSideFactsFromView: MatchSideCall takes the facts a view carries rather than
// reading the body, so an adapter that collected them decides without it.
func TestSideFactsFromView(t *testing.T) {
	rules := []SideCallRule{{Reason: "probe", Tools: ToolsNone, MaxTokens: 1}}
	body := []byte(`{"max_tokens":1,"messages":[]}`)
	var r SideReader
	r.Member("max_tokens", gjson.Parse("1"))
	v := &View{Side: r.Facts()}
	if _, ok := MatchSideCall(rules, v, []byte(`{"tools":[{}]}`)); !ok {
		t.Error("the view's facts were not used: the body says tools")
	}
	if _, ok := MatchSideCall(rules, &View{}, body); !ok {
		t.Error("a view without facts: the body was not read")
	}
	if f := ReadSideFacts(body); f != v.Side {
		t.Errorf("facts read from the body %+v, collected %+v", f, v.Side)
	}
}

// TestTextMatchPrefix: passing over the texts without a regexp's literal prefix
// decides as the regexp does, anchored, case-folded and prefix-less ones included.
func TestTextMatchPrefix(t *testing.T) {
	texts := []string{"", "Generate a concise, sentence-case title (3-7 words) now", "generate a concise",
		"x\nUser prompt:\nhi ", "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\nYour task is to create a detailed summary of the conversation so far"}
	for _, r := range BuiltinSideCalls() {
		if r.Match == nil {
			continue
		}
		for _, re := range []*regexp.Regexp{r.Match, regexp.MustCompile("(?i)" + r.Match.String()), regexp.MustCompile(`\w+ a concise`)} {
			for _, text := range texts {
				if got, want := textMatch(re, text), re.MatchString(text); got != want {
					t.Errorf("%s on %q: %v, the regexp says %v", re, text, got, want)
				}
			}
		}
	}
}
