package openai

import (
	"regexp"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/camproxy/camproxy/protocol"
)

// findTask applies rules in order; the first that matches sets r.Task and r.task.
func (r *Request) findTask(rules []protocol.TaskRule, segs []segment) {
	for _, rule := range rules {
		switch {
		case rule.Regex != nil:
			if r.matchRegex(rule.Regex, segs) {
				return
			}
		case rule.FirstUserMessage:
			if r.matchFirstUser(segs) {
				return
			}
		}
	}
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
	g := 0
	if re.NumSubexp() > 0 {
		g = 1
	}
	for _, s := range segs {
		loc := re.FindStringSubmatchIndex(s.text)
		if loc == nil || loc[2*g] < 0 || loc[2*g+1] <= loc[2*g] {
			continue
		}
		start, end := loc[2*g], loc[2*g+1]
		r.Task = s.text[start:end]
		inner := s.raw[1 : len(s.raw)-1]
		r.task = taskSpot{msg: s.msg, part: s.part, at: s.idx + 1 + rawOffset(inner, end), msgEnd: s.msgEnd}
		return true
	}
	return false
}

// rawOffset maps an offset into the decoded value of a JSON string to the offset in
// its raw text (raw excludes the quotes), so that an insertion lands after exactly
// the decoded bytes before it and the escapes of the client stay as they were.
//
// It decodes as gjson does, since gjson produced the text the offset points into:
// a \u escape of any surrogate swallows a following \u escape as its pair (an
// invalid pair decodes to U+FFFD), and a lone surrogate decodes to U+FFFD. An
// offset inside the bytes of one escape maps to the end of that escape.
func rawOffset(raw string, decoded int) int {
	i, d := 0, 0
	for d < decoded && i < len(raw) {
		if raw[i] != '\\' {
			// Plain bytes map one to one up to the next escape.
			j := strings.IndexByte(raw[i:], '\\')
			if j < 0 || d+j >= decoded {
				return min(i+decoded-d, len(raw))
			}
			i, d = i+j, d+j
			continue
		}
		if i+1 < len(raw) && raw[i+1] == 'u' && i+6 <= len(raw) {
			var n int
			i, n = unicodeEscape(raw, i)
			d += n
			continue
		}
		i, d = i+2, d+1 // \n, \", \\, \/ and friends decode to one byte
	}
	return min(i, len(raw))
}

// unicodeEscape decodes the \uXXXX escape at raw[i:] (and the pair gjson joins to
// it) and returns the offset after it and the number of UTF-8 bytes it decodes to.
func unicodeEscape(raw string, i int) (next, n int) {
	r := hex4(raw[i+2 : i+6])
	i += 6
	if utf16.IsSurrogate(r) && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
		r = utf16.DecodeRune(r, hex4(raw[i+2:i+6]))
		i += 6
	}
	n = utf8.RuneLen(r)
	if n < 0 {
		n = utf8.RuneLen(utf8.RuneError) // written as U+FFFD
	}
	return i, n
}

// hex4 parses four hex digits; invalid digits count as 0, as in gjson (the body was
// validated, so they do not occur).
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4 && i < len(s); i++ {
		c := s[i]
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0
		}
		r = r<<4 | rune(v)
	}
	return r
}
