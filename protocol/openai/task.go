package openai

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

// matchFirstUser takes the whole text of the first user message; the anchor is the
// end of its last text, so that appended context follows everything the user wrote.
func (r *Request) matchFirstUser(segs []segment) bool {
	for i, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		if m.Content == "" {
			return false
		}
		last := -1
		for j := range segs {
			if segs[j].msg == i {
				last = j
			} else if segs[j].msg > i {
				break
			}
		}
		if last < 0 {
			return false
		}
		s := &segs[last]
		r.Task = m.Content
		r.task = taskSpot{msg: i, part: s.part, at: s.idx + len(s.raw) - 1, msgEnd: s.msgEnd}
		return true
	}
	return false
}

// matchRegex matches re against each text in order; the task is its capture group
// (the whole match when it has none), which must be non-empty.
func (r *Request) matchRegex(re *regexp.Regexp, segs []segment) bool {
	for _, s := range segs {
		task, end, ok := jsontext.FindTask(re, s.text)
		if !ok {
			continue
		}
		r.Task = task
		r.task = taskSpot{msg: s.msg, part: s.part, at: s.idx + jsontext.QuotedOffset(s.raw, end), msgEnd: s.msgEnd}
		return true
	}
	return false
}
