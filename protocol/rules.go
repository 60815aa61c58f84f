package protocol

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// TaskRule finds the task text inside a conversation. Exactly one of Regex,
// FirstUserMessage, LastUserMessage and JSONPath is set; Skip, Strip and NoEnvelopes
// change what the rule reads. The first rule that matches wins.
//
// Every text a rule reads (a message's string content, or one text part or block) is
// first cleaned: the built-in envelopes (envelope.go) and the Strip patterns are
// removed, and the whitespace at both ends trimmed, until nothing changes. A text
// matching a Skip pattern is not read at all, nor is one left empty by cleaning.
type TaskRule struct {
	// Regex is matched against the cleaned text of each system, developer and user
	// message (each text part on its own) in order; its capture group is the task.
	Regex *regexp.Regexp
	// FirstUserMessage takes the cleaned text of the first user message that has any.
	FirstUserMessage bool
	// LastUserMessage takes the cleaned text of the last user message of the first
	// turn (before the first assistant message) that has any.
	LastUserMessage bool
	// JSONPath is a gjson path into the request body; the string there, cleaned, is
	// the task.
	JSONPath string

	// Skip: a text (string content, text part or block) that any of these matches, as
	// sent, is not read.
	Skip []*regexp.Regexp
	// Strip: every match of these is removed from a text before it is read.
	Strip []*regexp.Regexp
	// NoEnvelopes keeps the built-in envelopes in the text (config: envelopes: false).
	NoEnvelopes bool
	// Label is the rule as Found.Rule names it, "task.rules[i]: " and String(), set
	// where the rules are compiled so that a call does not format it again; when
	// empty, FindTask formats it.
	Label string
}

// String describes the rule as configured, for task explain and logs.
func (r TaskRule) String() string {
	var b strings.Builder
	switch {
	case r.Regex != nil:
		b.WriteString("regex " + strconv.Quote(r.Regex.String()))
	case r.FirstUserMessage:
		b.WriteString("first_user_message")
	case r.LastUserMessage:
		b.WriteString("last_user_message")
	case r.JSONPath != "":
		b.WriteString("json_path " + strconv.Quote(r.JSONPath))
	default:
		b.WriteString("(empty rule)")
	}
	for _, re := range r.Skip {
		b.WriteString(", skip " + strconv.Quote(re.String()))
	}
	for _, re := range r.Strip {
		b.WriteString(", strip " + strconv.Quote(re.String()))
	}
	if r.NoEnvelopes {
		b.WriteString(", envelopes: false")
	}
	return b.String()
}

// DefaultTaskRules is the built-in rule list: the first user message, envelopes removed.
func DefaultTaskRules() []TaskRule { return []TaskRule{TaskRule{FirstUserMessage: true}.Labelled(0)} }

// Labelled is r with its Label as the i-th of its rules.
func (r TaskRule) Labelled(i int) TaskRule {
	r.Label = ruleLabel(i, r)
	return r
}

func ruleLabel(i int, r TaskRule) string { return "task.rules[" + strconv.Itoa(i) + "]: " + r.String() }

// Segment is one text of a request that task rules read, in the order of the
// conversation: a top-level system prompt, and the text of each system, developer and
// user message (each text part or block on its own). Adapters list them; FindTask
// picks the task from them, so that the rule semantics live in one place.
type Segment struct {
	// Msg tells the message the text belongs to: the texts of one message are
	// consecutive and share it; a top-level system prompt uses -1.
	Msg  int
	Role string // "system", "developer" or "user"
	Text string // the decoded text
	// Turn is the number of assistant messages before the text's message: 0 in the
	// first turn.
	Turn int
	// Offset is the raw offset in the body of the JSON string holding Text (its
	// opening quote), or -1 when Text is not a whole JSON string of the body. A
	// json_path rule that lands on it anchors there.
	Offset int
}

// Found is the task FindTask found and where it ends, for the adapter to anchor
// AppendToTask and NewMessage.
type Found struct {
	Task string
	// Rule names the rule that matched: "task.rules[i]: " and its description.
	Rule string
	// Seg is the index in the segments of the text the task ends in.
	Seg int
	// End is the offset in segs[Seg].Text (decoded, as sent) right after the task's
	// last byte: appended context follows the task, and not an envelope after it.
	End int
	// Skipped says what the rule passed over before the task ("skipped setup
	// preamble (working directory, date)"); "" when nothing.
	Skipped string
	// Prefix says that the task depends on no text after those of its own message
	// (segs[Seg].Msg): the first rule found it, a regex or first_user_message rule that
	// reads the texts in order and stops at the task. Any call whose texts begin with
	// the same messages, up to and including that one, finds the same task there (an
	// adapter may remember it rather than read the texts again).
	Prefix bool
}

// FindTask applies rules in order until one matches; ok is false when none does.
// body is the request body (for json_path rules); segs are its texts.
func FindTask(rules []TaskRule, body []byte, segs []Segment) (f Found, ok bool) {
	for i := range rules {
		if f, ok = rules[i].find(body, segs); ok {
			f.Prefix = f.Prefix && i == 0 // a rule before it read every text, finding nothing
			if f.Rule = rules[i].Label; f.Rule == "" {
				f.Rule = ruleLabel(i, rules[i])
			}
			if f.Skipped != "" {
				f.Rule += "; " + f.Skipped
			}
			return f, true
		}
	}
	return Found{Seg: -1}, false
}

// find applies one rule.
func (r *TaskRule) find(body []byte, segs []Segment) (Found, bool) {
	switch {
	case r.Regex != nil:
		for k := range segs {
			e, ok := r.read(segs[k].Text)
			if !ok {
				continue
			}
			if task, end, ok := RegexTask(r.Regex, e.text); ok {
				return Found{Task: task, Seg: k, End: e.origOffset(end), Prefix: true}, true
			}
		}
	case r.FirstUserMessage:
		// A leading setup preamble is not the task; when nothing follows it, it is
		// read as any text.
		if f, ok := r.userMessage(segs, false, !r.NoEnvelopes); ok {
			f.Prefix = true
			return f, true
		}
		// Only preambles: which text is the task depends on every text.
		return r.userMessage(segs, false, false)
	case r.LastUserMessage:
		return r.userMessage(segs, true, false)
	case r.JSONPath != "":
		return r.jsonPath(body, segs)
	}
	return Found{}, false
}

// read cleans a text per the rule; ok is false when the rule does not read it
// (skipped, or nothing but whitespace left).
func (r *TaskRule) read(text string) (edited, bool) {
	for _, re := range r.Skip {
		if re.MatchString(text) {
			return edited{}, false
		}
	}
	e := cleanText(text, !r.NoEnvelopes, r.Strip)
	return e, strings.TrimSpace(e.text) != ""
}

// userMessage takes the first user message that has text, or with last the last one
// of the first turn. A message's texts are joined with "\n". With preambles, the
// user texts before the first one read that are setup preambles (setupPreamble) are
// passed over, and Found.Skipped names what they described.
func (r *TaskRule) userMessage(segs []Segment, last, preambles bool) (Found, bool) {
	var found Found
	ok := false
	var skipped []string
	for i := 0; i < len(segs); {
		j := i + 1
		for j < len(segs) && segs[j].Msg == segs[i].Msg {
			j++
		}
		s := &segs[i]
		if last && s.Turn > 0 {
			break
		}
		if s.Role == "user" && s.Msg >= 0 {
			var buf [4]string // a message's texts: mostly one, on the stack
			text := buf[:0]
			endSeg, end := -1, 0
			for k := i; k < j; k++ {
				e, read := r.read(segs[k].Text)
				if !read {
					continue
				}
				if preambles {
					if kinds, is := setupPreamble(e.text); is {
						for _, kind := range kinds {
							if !slices.Contains(skipped, kind) {
								skipped = append(skipped, kind)
							}
						}
						continue
					}
					preambles = false // only leading texts are passed over
				}
				text = append(text, e.text)
				endSeg, end = k, e.origOffset(len(e.text))
			}
			if len(text) > 0 {
				found, ok = Found{Task: strings.Join(text, "\n"), Seg: endSeg, End: end}, true
				if len(skipped) > 0 {
					found.Skipped = preambleNote(skipped)
				}
				if !last {
					return found, true
				}
			}
		}
		i = j
	}
	return found, ok
}

// jsonPath takes the string at the rule's path. It anchors in the text it is when it
// is one of segs, else after the first user message (or the last text): context
// needs a text to follow; a body with no text at all does not match.
func (r *TaskRule) jsonPath(body []byte, segs []Segment) (Found, bool) {
	v := gjson.GetBytes(body, r.JSONPath)
	if v.Type != gjson.String || len(segs) == 0 {
		return Found{}, false
	}
	e, ok := r.read(v.Str)
	if !ok {
		return Found{}, false
	}
	// The view outlives the body's buffer (the proxy's is reused): a copy.
	f := Found{Task: strings.Clone(e.text), Seg: -1}
	for k := range segs {
		if segs[k].Offset >= 0 && segs[k].Offset == v.Index && segs[k].Text == v.Str {
			f.Seg, f.End = k, e.origOffset(len(e.text))
			return f, true
		}
	}
	for k := range segs {
		if segs[k].Role == "user" && segs[k].Msg >= 0 {
			f.Seg = k
			for k+1 < len(segs) && segs[k+1].Msg == segs[k].Msg {
				k++
				f.Seg = k
			}
			break
		}
	}
	if f.Seg < 0 {
		f.Seg = len(segs) - 1
	}
	f.End = len(segs[f.Seg].Text)
	return f, true
}

// RegexTask matches re against text; the task is its first capture group, or the
// whole match when it has none, and must be non-empty (ok is false otherwise). end
// is the offset in text right after the task.
func RegexTask(re *regexp.Regexp, text string) (task string, end int, ok bool) {
	g := 0
	if re.NumSubexp() > 0 {
		g = 1
	}
	loc := re.FindStringSubmatchIndex(text)
	if loc == nil || loc[2*g] < 0 || loc[2*g+1] <= loc[2*g] {
		return "", 0, false
	}
	return text[loc[2*g]:loc[2*g+1]], loc[2*g+1], true
}
