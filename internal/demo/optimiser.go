package demo

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook"
)

// Optimiser is the scripted reflector and mutator behind one OpenAI-compatible
// server (point the learner's model base URL at URL()+"/v1"). Which role a request
// is for is read from the tools it offers: tag_entry is the reflector's, add_entry
// the mutator's. Like a real model server it keeps no state between requests: each
// answer is decided from the conversation so far (the prompt's playbook lines, the
// calls already made and their results).
//
// The reflector greps the sandbox for the codes the agent submitted and whether
// each was ACCEPTED or REJECTED, tags the playbook entries that gave those codes
// helpful or harmful, then finishes. The mutator greps for what the rejections
// revealed ("policy requires: …") and adds each rule the playbook does not state
// yet, then finishes. With Harmful on, the mutator instead deletes every entry and
// adds a misleading version of each revealed rule (a wrong code): the version it
// makes is worse, which is what the guardrail is there to stop.
type Optimiser struct {
	*testkit.Upstream
	// Harmful switches the mutator to harmful edits; safe to flip at any time.
	Harmful atomic.Bool
	// HarmfulEdits counts the mutator answers that made harmful edits.
	HarmfulEdits atomic.Int64
}

// NewOptimiser starts the scripted optimiser models on loopback.
func NewOptimiser() *Optimiser {
	o := &Optimiser{Upstream: testkit.NewUpstream()}
	o.Configure(func(u *testkit.Upstream) { u.Reply = o.Reply })
	return o
}

// BaseURL is the OpenAI API base the learner's models use.
func (o *Optimiser) BaseURL() string { return o.URL + "/v1" }

// Section is where the mutator files the rules it adds.
const Section = "policies"

// The greps the scripted models run in the sandbox.
const (
	GrepOutcomes = `"code"|ACCEPTED|REJECTED`
	GrepReveals  = Reveal
)

// Reply answers one chat request of the learner.
func (o *Optimiser) Reply(body gjson.Result) testkit.Reply {
	c := readConversation(body)
	if body.Get("tool_choice").String() == "none" || (!c.tools[playbook.ToolTag] && !c.tools[playbook.ToolAdd]) {
		return testkit.Reply{Content: "Done with this batch."}
	}
	var calls []testkit.ToolCall
	switch {
	case c.tools[playbook.ToolTag]:
		calls = reflectMove(c)
	default:
		harmful := o.Harmful.Load()
		calls = mutateMove(c, harmful)
		if harmful && calls[0].Name != "grep" && calls[0].Name != playbook.ToolFinish {
			o.HarmfulEdits.Add(1)
		}
	}
	for i := range calls {
		calls[i].ID = fmt.Sprintf("call_%d_%d", c.messages, i)
	}
	return testkit.Reply{ToolCalls: calls}
}

// conversation is what a scripted model reads of a request.
type conversation struct {
	tools    map[string]bool
	entries  []playbook.Entry // the playbook lines of the prompt
	calls    []madeCall       // every tool call already made, in order, with its result
	messages int
}

type madeCall struct {
	name, args, result string
}

// promptLine is one "[entry_id] (section) content" line (playbook.Lines).
var promptLine = regexp.MustCompile(`(?m)^\[([^\]\s]+)\] \(([^)\n]*)\) (.+)$`)

func readConversation(body gjson.Result) conversation {
	c := conversation{tools: map[string]bool{}}
	for _, t := range body.Get("tools").Array() {
		c.tools[t.Get("function.name").String()] = true
	}
	results := map[string]string{}
	msgs := body.Get("messages").Array()
	c.messages = len(msgs)
	for _, m := range msgs {
		if m.Get("role").String() == "tool" {
			results[m.Get("tool_call_id").String()] = text(m.Get("content"))
		}
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		switch m.Get("role").String() {
		case "system", "developer", "user":
			for _, l := range promptLine.FindAllStringSubmatch(text(m.Get("content")), -1) {
				if !seen[l[1]] {
					seen[l[1]] = true
					c.entries = append(c.entries, playbook.Entry{ID: l[1], Section: l[2], Content: strings.TrimSpace(l[3])})
				}
			}
		case "assistant":
			for _, tc := range m.Get("tool_calls").Array() {
				c.calls = append(c.calls, madeCall{name: tc.Get("function.name").String(),
					args: tc.Get("function.arguments").String(), result: results[tc.Get("id").String()]})
			}
		}
	}
	return c
}

// grepped returns the results of the calls that grepped for pattern, and whether
// there was one.
func (c conversation) grepped(pattern string) (string, bool) {
	var out []string
	for _, mc := range c.calls {
		if mc.name == "grep" && gjson.Get(mc.args, "pattern").String() == pattern {
			out = append(out, mc.result)
		}
	}
	return strings.Join(out, "\n"), len(out) > 0
}

// called reports whether any of tools was already called.
func (c conversation) called(tools ...string) bool {
	for _, mc := range c.calls {
		for _, t := range tools {
			if mc.name == t {
				return true
			}
		}
	}
	return false
}

func call(name string, args map[string]string) testkit.ToolCall {
	b, _ := json.Marshal(args)
	return testkit.ToolCall{Name: name, Arguments: string(b)}
}

func finish(summary string) []testkit.ToolCall {
	return []testkit.ToolCall{call(playbook.ToolFinish, map[string]string{"summary": summary})}
}

// grepLine is one line of a grep result: "path:line: text".
var grepLine = regexp.MustCompile(`^(\S+?):(\d+): (.*)$`)

// Outcome is one submit the agent made in a run and what the environment said.
type Outcome struct {
	File     string
	Code     string
	Accepted bool
}

// Outcomes reads the agent's submits from a grep for GrepOutcomes: in each file, a
// code is paired with the ACCEPTED or REJECTED line that follows it.
func Outcomes(grep string) []Outcome {
	var out []Outcome
	pending := map[string]string{} // file → code awaiting its result
	for _, line := range strings.Split(grep, "\n") {
		m := grepLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		file, rest := m[1], m[3]
		if c := codeArg.FindStringSubmatch(rest); c != nil {
			pending[file] = c[1]
			continue
		}
		code, ok := pending[file]
		if !ok {
			continue
		}
		switch {
		case strings.Contains(rest, Accepted):
			out = append(out, Outcome{File: file, Code: code, Accepted: true})
		case strings.Contains(rest, Rejected):
			out = append(out, Outcome{File: file, Code: code})
		default:
			continue
		}
		delete(pending, file)
	}
	return out
}

// revealed matches what a rejection revealed, up to the end of the line or of the
// JSON string it may sit in.
var revealed = regexp.MustCompile(regexp.QuoteMeta(Reveal) + `\s*([^"\\\n]+)`)

// Revealed returns the rules a grep for GrepReveals shows, each once, in order.
func Revealed(grep string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range revealed.FindAllStringSubmatch(grep, -1) {
		r := strings.TrimSpace(m[1])
		if r != "" && !seen[playbook.Normalize(r)] {
			seen[playbook.Normalize(r)] = true
			out = append(out, r)
		}
	}
	return out
}

// reflectMove is the scripted reflector's next move.
func reflectMove(c conversation) []testkit.ToolCall {
	grep, done := c.grepped(GrepOutcomes)
	if !done {
		return []testkit.ToolCall{call("grep", map[string]string{"pattern": GrepOutcomes, "path": "."})}
	}
	if c.called(playbook.ToolTag, playbook.ToolFinish) {
		return finish("Tagged the entries the agent followed by the outcome of its submit.")
	}
	var calls []testkit.ToolCall
	accepted, rejected := 0, 0
	for _, o := range Outcomes(grep) {
		if o.Accepted {
			accepted++
		} else {
			rejected++
		}
		for _, e := range c.entries {
			if !statesCode(e.Content, o.Code) {
				continue
			}
			tag := "helpful"
			if !o.Accepted {
				tag = "harmful"
			}
			calls = append(calls, call(playbook.ToolTag, map[string]string{"entry_id": e.ID, "tag": tag}))
		}
	}
	if len(calls) == 0 {
		return finish(fmt.Sprintf("%d submits accepted, %d rejected; no entry gave the codes used.", accepted, rejected))
	}
	return calls
}

// statesCode reports whether content names code as the code to submit.
func statesCode(content, code string) bool {
	for _, m := range ruleCode.FindAllStringSubmatch(content, -1) {
		if m[1] == code {
			return true
		}
	}
	return false
}

// mutateMove is the scripted mutator's next move.
func mutateMove(c conversation, harmful bool) []testkit.ToolCall {
	grep, done := c.grepped(GrepReveals)
	if !done {
		return []testkit.ToolCall{call("grep", map[string]string{"pattern": GrepReveals, "path": "."})}
	}
	if c.called(playbook.ToolAdd, playbook.ToolUpdate, playbook.ToolDelete, playbook.ToolFinish) {
		return finish("Added the rules the rejections revealed.")
	}
	rules := Revealed(grep)
	var calls []testkit.ToolCall
	if harmful {
		for _, e := range c.entries {
			calls = append(calls, call(playbook.ToolDelete, map[string]string{"entry_id": e.ID}))
		}
		for _, r := range rules {
			calls = append(calls, call(playbook.ToolAdd, map[string]string{"section": Section, "content": Mislead(r)}))
		}
	} else {
		known := map[string]bool{}
		for _, e := range c.entries {
			known[playbook.Normalize(e.Content)] = true
		}
		for _, r := range rules {
			if !known[playbook.Normalize(r)] {
				calls = append(calls, call(playbook.ToolAdd, map[string]string{"section": Section, "content": r}))
			}
		}
	}
	if len(calls) == 0 {
		return finish("Every revealed rule is in the playbook already.")
	}
	return calls
}

// codeWord is a code of the environment.
var codeWord = regexp.MustCompile(`\b[A-Z]{2}-[0-9]{4}\b`)

// Mislead turns a rule (or a code) into a plausible wrong one: each code's digits
// reversed (no code of the environment reads the same backwards).
func Mislead(rule string) string {
	return codeWord.ReplaceAllStringFunc(rule, func(s string) string {
		d := []byte(s[len(s)-4:])
		for i, j := 0, len(d)-1; i < j; i, j = i+1, j-1 {
			d[i], d[j] = d[j], d[i]
		}
		return s[:len(s)-4] + string(d)
	})
}
