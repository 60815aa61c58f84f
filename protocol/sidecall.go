package protocol

import (
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/tidwall/gjson"
)

// A side call is an agent's auxiliary request, not a turn of its task: a session
// title, a compaction summary, a quota probe. The harness sends it beside the agent's
// turns, usually without tools, quoting the user's request inside an instruction of
// its own. The proxy relays it unaugmented and opens no episode for it; the rules
// below recognise it from the parsed view and the body, read-only.

// Tools conditions of a SideCallRule.
const (
	ToolsAny  = ""     // tools or not
	ToolsNone = "none" // the call offers the model no tool
	ToolsSome = "some" // the call offers at least one tool
)

// SideCallRule recognises one kind of side call. Every condition set must hold; a
// rule sets at least one of Model, Match and MaxTokens.
type SideCallRule struct {
	// Reason names the kind of call ("title", "compact", "probe"…): the metric's
	// label and the X-CAM-Side-Call header.
	Reason string
	// Model is a glob (path.Match: * ? [ ]) on the model name, case-insensitive.
	Model string
	// Tools is ToolsAny, ToolsNone or ToolsSome.
	Tools string
	// Match is searched in the call's instruction texts: each system and developer
	// message, and the last message when it is the user's (see sideTexts).
	Match *regexp.Regexp
	// MaxTokens > 0: the call asks for at most this many output tokens.
	MaxTokens int64
	// Quote, when set, finds the user's request the call quotes (its first capture
	// group) in the same texts: the proxy looks the session up by it.
	Quote *regexp.Regexp
	// Source says where the rule comes from ("side_calls.rules[0]", or the built-in
	// signature's name), for logs and task explain.
	Source string
}

// SideCall is what a rule recognised.
type SideCall struct {
	Reason string
	Rule   string // the rule's Source
	// Quoted is the user's request the call quotes, "" when the rule has no Quote or
	// it matched nothing.
	Quoted string
}

// BuiltinSideCalls are the signatures of the side calls the harnesses of the
// compatibility suite send, each taken from their captures
// (protocol/testdata/harness/*/side-*.json). Claude Code sends its title and
// compaction calls to the model of the session, not a small one: they are told by
// their instructions, not by the model.
func BuiltinSideCalls() []SideCallRule {
	return []SideCallRule{
		{Source: "builtin: claude-code title", Reason: "title", Tools: ToolsNone,
			Match: regexp.MustCompile(`Generate a concise, sentence-case title \(3-7 words\)`),
			Quote: regexp.MustCompile(`(?s)^<session>\s*(.*?)\s*</session>`)},
		{Source: "builtin: claude-code compact", Reason: "compact",
			Match: regexp.MustCompile(`(?s)CRITICAL: Respond with TEXT ONLY\. Do NOT call any tools\..*Your task is to create a detailed summary of the conversation so far`)},
		{Source: "builtin: codex title", Reason: "title",
			Match: regexp.MustCompile(`^Generate a concise, single-line task title of at most \d+ characters`),
			Quote: regexp.MustCompile(`(?s)\nUser prompt:\n(.*\S)\s*$`)},
		{Source: "builtin: codex compact", Reason: "compact",
			Match: regexp.MustCompile(`^You are performing a CONTEXT CHECKPOINT COMPACTION\. Create a handoff summary`)},
		// Gemini CLI asks a flash-lite model to score the request's complexity
		// before each turn (its model router): the session's model does the turn.
		{Source: "builtin: gemini-cli router", Reason: "router", Tools: ToolsNone,
			Match: regexp.MustCompile(`^\s*You are a specialized Task Routing AI\. Your sole function is to analyze the user's request and assign a \*\*Complexity Score\*\*`)},
		// A one-token call is a probe (Claude Code's quota check and model
		// validation send max_tokens 1, no tools): it cannot be a turn of a task.
		{Source: "builtin: probe", Reason: "probe", Tools: ToolsNone, MaxTokens: 1},
	}
}

// String describes the rule as configured.
func (r *SideCallRule) String() string {
	var parts []string
	if r.Model != "" {
		parts = append(parts, "model "+strconv.Quote(r.Model))
	}
	if r.Tools != ToolsAny {
		parts = append(parts, "tools "+r.Tools)
	}
	if r.Match != nil {
		parts = append(parts, "match "+strconv.Quote(r.Match.String()))
	}
	if r.MaxTokens > 0 {
		parts = append(parts, "max_tokens <= "+strconv.FormatInt(r.MaxTokens, 10))
	}
	return r.Reason + ": " + strings.Join(parts, ", ")
}

// MatchSideCall reports the first rule that recognises the call as a side call. v is
// the parsed view of body; both are only read. rules must not be modified once
// matched with: the view's slots remember the matches of its messages per rule set.
func MatchSideCall(rules []SideCallRule, v *View, body []byte) (SideCall, bool) {
	if len(rules) == 0 {
		return SideCall{}, false
	}
	model := strings.ToLower(v.Model)
	var facts *SideFacts // read when a rule first asks, unless the view carries them
	var read SideFacts
	if v.Side.known {
		facts = &v.Side
	}
	for i := range rules {
		r := &rules[i]
		if r.Model != "" {
			if ok, _ := path.Match(strings.ToLower(r.Model), model); !ok { // no copy when already lower case
				continue
			}
		}
		if r.Tools != ToolsAny {
			if facts == nil {
				read = ReadSideFacts(body)
				facts = &read
			}
			if (r.Tools == ToolsNone) == facts.tools {
				continue
			}
		}
		if r.MaxTokens > 0 {
			if facts == nil {
				read = ReadSideFacts(body)
				facts = &read
			}
			if !facts.hasMax || facts.maxTokens > r.MaxTokens {
				continue
			}
		}
		if r.Match != nil && !sideMatch(rules, i, v) {
			continue
		}
		sc := SideCall{Reason: r.Reason, Rule: r.Source}
		if r.Quote != nil {
			for _, t := range sideTexts(v.Messages) {
				if task, _, ok := RegexTask(r.Quote, t); ok {
					sc.Quoted = strings.Clone(task)
					break
				}
			}
		}
		return sc, true
	}
	return SideCall{}, false
}

// sideMatch reports whether rules[i].Match matches a text of the messages a side
// call states its instruction in (sideText). A message with a slot searches its
// texts once per rule set (Slot.sideHit): a resent conversation's system prompt,
// thousands of bytes, is not searched again on every call.
func sideMatch(rules []SideCallRule, i int, v *View) bool {
	msgs := v.Messages
	for k := range msgs {
		if !sideText(msgs, k) {
			continue
		}
		if k < len(v.Slots) && v.Slots[k] != nil && i < sideHitBits {
			if v.Slots[k].sideHit(rules, i, &msgs[k]) {
				return true
			}
			continue
		}
		if msgMatch(rules[i].Match, &msgs[k]) {
			return true
		}
	}
	return false
}

// msgMatch reports whether re matches one of m's texts (appendTexts).
func msgMatch(re *regexp.Regexp, m *Message) bool {
	if len(m.Parts) == 0 {
		return m.Content != "" && textMatch(re, m.Content)
	}
	for _, p := range m.Parts {
		if p.Type == PartText && p.Text != "" && textMatch(re, p.Text) {
			return true
		}
	}
	return false
}

func textMatch(re *regexp.Regexp, t string) bool {
	// Every match starts with the regexp's literal prefix, if it has one: a text
	// without it is passed over by one search, without setting up the matcher (most
	// calls' system prompts hold none of the side calls' instructions).
	if prefix, _ := re.LiteralPrefix(); prefix != "" && !strings.Contains(t, prefix) {
		return false
	}
	return re.MatchString(t)
}

// sideHitBits rules of a set, its first, have their matches remembered in slots.
const sideHitBits = 64

// sideHits is what a slot remembers of its message for side-call rules: rules[i].Match
// was searched in the message's texts when bit i of known is set, and matched one
// when bit i of hits is also set. The rule set is known by its first rule's address:
// sets are compiled once with the configuration and never modified, and the pointer
// kept holds the set's array, so no other set takes its address while the slot
// remembers it.
type sideHits struct {
	rules       *SideCallRule
	n           int
	known, hits atomic.Uint64
}

// sideHit reports whether rules[i].Match matches one of the texts of m, the slot's
// message, searching m once per rule set and rule: only the rules a call gets to
// (past their cheap conditions) are searched. Calls racing on a slot each search
// and set the same bits.
func (s *Slot) sideHit(rules []SideCallRule, i int, m *Message) bool {
	h := s.side.Load()
	if h == nil || h.rules != &rules[0] || h.n != len(rules) {
		h = &sideHits{rules: &rules[0], n: len(rules)}
		s.side.Store(h)
	}
	bit := uint64(1) << i
	if h.known.Load()&bit != 0 {
		return h.hits.Load()&bit != 0
	}
	hit := msgMatch(rules[i].Match, m)
	if hit {
		h.hits.Or(bit) // before known: who reads known's bit reads this one
	}
	h.known.Or(bit)
	return hit
}

// sideTexts are the texts a side call states its instruction in: the system and
// developer messages, and the last message of the call when it is the user's. An
// agent's turn that merely quotes an instruction in a tool's output or an earlier
// message is not read.
func sideTexts(msgs []Message) []string {
	var out []string
	for i := range msgs {
		if sideText(msgs, i) {
			out = appendTexts(out, &msgs[i])
		}
	}
	return out
}

// sideText reports whether msgs[i] is one of the messages sideTexts reads.
func sideText(msgs []Message, i int) bool {
	r := msgs[i].Role
	return r == "system" || r == "developer" || i == len(msgs)-1 && r == "user"
}

// appendTexts adds a message's text: its content (text parts joined with "\n"), or
// with media parts each text part on its own.
func appendTexts(out []string, m *Message) []string {
	if len(m.Parts) == 0 {
		if m.Content != "" {
			out = append(out, m.Content)
		}
		return out
	}
	for _, p := range m.Parts {
		if p.Type == PartText && p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}

// SideFacts are what the cheap conditions read of the body: whether it offers a tool
// and the output-token cap it asks for. They are read in one pass over the body's
// top-level members (the first of each name, as gjson's paths find them): reading
// each path on its own scanned the whole body up to seven times per call. An adapter
// that walks those members anyway collects them on the way (SideReader) into its
// view, and MatchSideCall then reads nothing of the body.
type SideFacts struct {
	known     bool // set by SideReader.Facts: the view carries them
	tools     bool
	maxTokens int64
	hasMax    bool
}

// SideReader collects SideFacts from the top-level members of a body, in order
// (Member), for the adapter's walk that reads them anyway.
type SideReader struct {
	tools, toolConfig, input, inference gjson.Result
	caps                                [3]gjson.Result // max_tokens, max_output_tokens, max_completion_tokens
}

// SideKey reports whether the side facts read the top-level member key: an adapter
// passes only those to Member.
func SideKey(key string) bool {
	switch key {
	case "tools", "toolConfig", "input", "max_tokens", "max_output_tokens", "max_completion_tokens", "inferenceConfig":
		return true
	}
	return false
}

// Member notes the top-level member key's value v; the first of each name counts.
// v is read by Facts, not kept: it may alias the body until then.
func (s *SideReader) Member(key string, v gjson.Result) {
	var dst *gjson.Result
	switch key {
	case "tools":
		dst = &s.tools
	case "toolConfig":
		dst = &s.toolConfig
	case "input":
		dst = &s.input
	case "max_tokens":
		dst = &s.caps[0]
	case "max_output_tokens":
		dst = &s.caps[1]
	case "max_completion_tokens":
		dst = &s.caps[2]
	case "inferenceConfig":
		dst = &s.inference
	default:
		return
	}
	if !dst.Exists() {
		*dst = v
	}
}

// Facts are the side facts of the members noted.
func (s *SideReader) Facts() SideFacts {
	f := SideFacts{known: true}
	f.tools = offersTools(s.tools, s.toolConfig, s.input)
	caps := [4]gjson.Result{s.caps[0], s.caps[1], s.caps[2], getIn(s.inference, "maxTokens")}
	f.maxTokens, f.hasMax = maxTokens(caps[:])
	return f
}

// ReadSideFacts reads the side facts of a valid body by a walk of its own: for views
// whose adapter did not collect them.
func ReadSideFacts(body []byte) SideFacts {
	var s SideReader
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		s.Member(k.Str, v)
		return true
	})
	return s.Facts()
}

// offersTools reports whether the body offers the model a tool, in any wire API:
// tools (OpenAI chat and Responses, Anthropic), Bedrock's toolConfig.tools, or the
// Responses input item additional_tools (Codex's code mode offers its tools there
// and leaves tools empty).
func offersTools(tools, toolConfig, input gjson.Result) bool {
	return nonEmpty(tools) || nonEmpty(getIn(toolConfig, "tools")) ||
		input.IsArray() && input.Get(`#(type=="additional_tools")`).Exists()
}

// getIn is v.Get(path), without parsing the path when v is absent (most bodies send
// neither toolConfig nor inferenceConfig, and Facts runs on every call).
func getIn(v gjson.Result, path string) gjson.Result {
	if v.Raw == "" {
		return gjson.Result{}
	}
	return v.Get(path)
}

// nonEmpty is len(v.Array()) > 0 without building the array: a value other than null
// counts as one element, an array as its elements.
func nonEmpty(v gjson.Result) bool {
	if v.Type == gjson.Null {
		return false
	}
	if !v.IsArray() {
		return true
	}
	for i := 1; i < len(v.Raw); i++ {
		switch v.Raw[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case ']':
			return false
		}
		return true
	}
	return false
}

// maxTokens is the output-token cap the call asks for, whatever its wire API calls it:
// the first number of max_tokens, max_output_tokens, max_completion_tokens and
// inferenceConfig.maxTokens.
func maxTokens(caps []gjson.Result) (int64, bool) {
	for _, v := range caps {
		if v.Type == gjson.Number {
			return v.Int(), true
		}
	}
	return 0, false
}
