package anthropic

import (
	"regexp"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// findTask applies rules in order; the first that matches sets r.Task and r.task.
func (r *Request) findTask(rules []protocol.TaskRule, segs []segment) {
	protocol.FirstMatch(rules, func(re *regexp.Regexp) bool { return r.matchRegex(re, segs) },
		func() bool { return r.matchFirstUser(segs) })
}

// matchRegex matches re against each text (the system prompt's, then the user
// messages') in order; the task is its capture group (the whole match when it has
// none), which must be non-empty.
func (r *Request) matchRegex(re *regexp.Regexp, segs []segment) bool {
	for _, s := range segs {
		task, end, ok := jsontext.FindTask(re, s.text)
		if !ok {
			continue
		}
		r.Task = task
		r.task = taskSpot{at: s.idx + jsontext.QuotedOffset(s.raw, end), after: r.newMessageAnchor(s)}
		return true
	}
	return false
}

// matchFirstUser takes the text of the first user message that has any: its text
// blocks joined, tool results left out. The anchor is the end of its last text, so
// that appended context follows everything the user wrote.
func (r *Request) matchFirstUser(segs []segment) bool {
	for i := 0; i < len(segs); {
		j := i + 1
		for j < len(segs) && segs[j].msg == segs[i].msg {
			j++
		}
		if segs[i].msg >= 0 {
			var text jsontext.Joiner
			for _, s := range segs[i:j] {
				text.Add(s.text)
			}
			if t := text.String(); t != "" {
				last := segs[j-1]
				r.Task = t
				r.task = taskSpot{at: last.idx + len(last.raw) - 1, after: r.newMessageAnchor(last)}
				return true
			}
		}
		i = j
	}
	return false
}

// newMessageAnchor says where NewMessage inserts for a task found in s: right after
// its message, or at the front of the messages when the task is in the system prompt.
func (r *Request) newMessageAnchor(s segment) anchor {
	if s.msg >= 0 {
		return anchor{at: s.msgEnd, prefix: `,{"role":"user","content":"`, suffix: `"}`, trim: true}
	}
	suffix := `"}`
	if r.wireMessages > 0 {
		suffix = `"},`
	}
	return anchor{at: r.arrOpen + 1, prefix: `{"role":"user","content":"`, suffix: suffix, trim: true}
}
