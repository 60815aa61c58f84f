package protocol

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// envelope is a block of harness scaffolding that is never the user's request. Agents
// send these inside the user's turn, so first_user_message would otherwise take them
// for the task.
type envelope struct {
	open  string // the block starts with it
	close string // and ends right after it; a block with no close runs to the end of the text
	// atStart: only a block that starts the text (after whitespace) is one; its
	// closing marker is optional.
	atStart bool
}

// envelopes are the built-in envelopes, removed from every text before a task rule
// reads it (unless the rule says envelopes: false). The README lists them with the
// clients that send them.
var envelopes = []envelope{
	// Codex CLI: the working directory, shell, sandbox and approval policy, sent as a
	// user item (or a part of one) of its own before the request.
	{open: "<environment_context>", close: "</environment_context>"},
	// Codex CLI: the user's ~/.codex/instructions.md (older releases; newer ones send
	// AGENTS.md as below).
	{open: "<user_instructions>", close: "</user_instructions>"},
	// Codex CLI: the project's AGENTS.md, "# AGENTS.md instructions for /dir" and the
	// file inside <INSTRUCTIONS>…</INSTRUCTIONS>.
	{open: "# AGENTS.md instructions for ", close: "</INSTRUCTIONS>", atStart: true},
	// Claude Code: context (CLAUDE.md, today's date) and reminders (the todo list,
	// hooks' output) around the request in the same user message.
	{open: "<system-reminder>", close: "</system-reminder>"},
}

// span is the range [from, to) of an original text.
type span struct{ from, to int }

// edited is a text with parts removed: the concatenation of spans of the original.
// Offsets into the edited text map back to the original, so that a task found in it
// still anchors in the body. A value, not a pointer, and whole until a first cut
// (spans nil: the one span of all of orig): a task rule reads each text of a call,
// and most texts lose nothing, which then costs no allocation.
type edited struct {
	orig  string
	spans []span // what is kept; meaningless while whole
	text  string // the concatenation, kept in step with spans
	whole bool   // nothing was removed: text is orig
}

func newEdited(s string) edited {
	return edited{orig: s, text: s, whole: true}
}

// kept is the spans of orig that e keeps; one, the whole of orig, is written to one.
func (e *edited) kept(one *[1]span) []span {
	if e.whole {
		one[0] = span{0, len(e.orig)}
		return one[:]
	}
	return e.spans
}

// cut sets what e keeps: spans, and text their concatenation.
func (e *edited) cut(spans []span) {
	e.spans, e.whole = spans, false
	e.rebuild()
}

// rebuild recomputes text after removals.
func (e *edited) rebuild() {
	switch len(e.spans) {
	case 0:
		e.text = ""
		return
	case 1:
		e.text = e.orig[e.spans[0].from:e.spans[0].to]
		return
	}
	var b strings.Builder
	for _, sp := range e.spans {
		b.WriteString(e.orig[sp.from:sp.to])
	}
	e.text = b.String()
}

// origOffset maps an offset of the edited text to the original: an offset at the end
// of a span maps to the end of that span (right after the byte before it), not to the
// start of the next one, so that an anchor follows the task and not what was removed
// after it.
func (e *edited) origOffset(p int) int {
	if e.whole {
		return min(p, len(e.orig))
	}
	at := 0
	for _, sp := range e.spans {
		n := sp.to - sp.from
		if p <= at+n {
			return sp.from + p - at
		}
		at += n
	}
	if len(e.spans) == 0 {
		return 0
	}
	return e.spans[len(e.spans)-1].to
}

// maxPasses bounds the removal passes over one text; a text whose removals still
// change it after so many (deliberately nested markers) counts as all scaffolding.
const maxPasses = 16

// cleanText removes the built-in envelopes (when envelopes) and the strip patterns'
// matches from s, and then the whitespace the removals left at both ends, until
// nothing changes: the result has no envelope and no strip match left, so cleaning it
// again returns it unchanged. A text nothing was removed from is returned as is.
func cleanText(s string, envelopes bool, strip []*regexp.Regexp) edited {
	e := newEdited(s)
	removed := false // a text nothing is removed from is read as sent, spaces included
	for range maxPasses {
		changed := false
		if envelopes && removeEnvelopes(&e) {
			changed = true
		}
		for _, re := range strip {
			if removeMatches(&e, re) {
				changed = true
			}
		}
		removed = removed || changed
		if removed && trimEdited(&e) {
			changed = true
		}
		if !changed {
			return e
		}
	}
	e.cut(nil)
	return e
}

// removeEnvelopes removes every complete envelope block from e; it reports whether
// it removed any.
func removeEnvelopes(e *edited) bool {
	t := e.text
	if strings.IndexByte(t, '<') < 0 && strings.IndexByte(t, '#') < 0 {
		return false // the common case: no marker can be there
	}
	var cuts []span
	for _, env := range envelopes {
		if env.atStart {
			start := len(t) - len(strings.TrimLeftFunc(t, unicode.IsSpace))
			if !strings.HasPrefix(t[start:], env.open) {
				continue
			}
			end := len(t)
			if c := strings.Index(t[start+len(env.open):], env.close); c >= 0 {
				end = start + len(env.open) + c + len(env.close)
			}
			cuts = append(cuts, span{start, end})
			continue
		}
		for from := 0; ; {
			o := strings.Index(t[from:], env.open)
			if o < 0 {
				break
			}
			o += from
			c := strings.Index(t[o+len(env.open):], env.close)
			if c < 0 {
				break // an unclosed block is not removed: it may be the user's own text
			}
			end := o + len(env.open) + c + len(env.close)
			cuts = append(cuts, span{o, end})
			from = end
		}
	}
	if len(cuts) == 0 {
		return false
	}
	applyCuts(e, cuts)
	return true
}

// removeMatches removes every match of re from e; it reports whether one was non-empty.
func removeMatches(e *edited, re *regexp.Regexp) bool {
	var cuts []span
	for _, m := range re.FindAllStringIndex(e.text, -1) {
		if m[1] > m[0] {
			cuts = append(cuts, span{m[0], m[1]})
		}
	}
	if len(cuts) == 0 {
		return false
	}
	applyCuts(e, cuts)
	return true
}

// applyCuts removes ranges of the edited text, which may overlap, in one pass over
// the spans.
func applyCuts(e *edited, cuts []span) {
	slices.SortFunc(cuts, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var one [1]span
	spans := e.kept(&one)
	out := make([]span, 0, len(spans)+len(cuts))
	at, ci := 0, 0 // at: the offset in the edited text of the span's start
	for _, sp := range spans {
		n := sp.to - sp.from
		cur := 0 // the span's bytes before cur are kept or cut already
		for ci < len(cuts) && cuts[ci].from < at+n {
			c := cuts[ci]
			lo, hi := max(c.from-at, cur), min(c.to-at, n)
			if lo > cur {
				out = append(out, span{sp.from + cur, sp.from + lo})
			}
			cur = max(cur, hi)
			if c.to > at+n {
				break // the cut goes on into the next span
			}
			ci++
		}
		if cur < n {
			out = append(out, span{sp.from + cur, sp.to})
		}
		at += n
	}
	e.cut(out)
}

// trimEdited removes the whitespace at both ends of e; it reports whether there was any.
func trimEdited(e *edited) bool {
	t := e.text
	lead := len(t) - len(strings.TrimLeftFunc(t, unicode.IsSpace))
	if lead == len(t) {
		if len(t) == 0 {
			return false
		}
		e.cut(nil)
		return true
	}
	trail := len(t) - len(strings.TrimRightFunc(t, unicode.IsSpace))
	if lead == 0 && trail == 0 {
		return false
	}
	var cuts []span
	if lead > 0 {
		cuts = append(cuts, span{0, lead})
	}
	if trail > 0 {
		cuts = append(cuts, span{len(t) - trail, len(t)})
	}
	applyCuts(e, cuts)
	return true
}

// StripEnvelopes returns text without the built-in envelopes and the whitespace they
// leave at its ends: what a task rule reads of a text by default.
func StripEnvelopes(text string) string {
	if strings.IndexByte(text, '<') < 0 && strings.IndexByte(text, '#') < 0 {
		return text // no marker can be there: no allocation
	}
	return cleanText(text, true, nil).text
}
