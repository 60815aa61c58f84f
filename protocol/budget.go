package protocol

import (
	"math"
	"strings"
	"unicode/utf8"
)

// DefaultMaxAnswer is the answer bytes a decoder keeps for the record when it is not
// told otherwise (replay.max_answer_bytes). 1 MiB is above the longest answer a model
// writes today (128k output tokens, reasoning included, are about 0.5 MiB of text), so
// that only a runaway or hostile stream is cut, and it keeps a sidecar holding a few
// hundred open streams within a few hundred MiB.
const DefaultMaxAnswer = 1 << 20

const (
	// escapeFactor is how much longer an answer's text may be as a JSON string in the
	// one event that carries it whole: a quote, a backslash or a newline takes 2
	// bytes, and an encoder that escapes non-ASCII (Python's ensure_ascii) writes a
	// 3-byte character as a 6-byte \u escape. Text of control characters (6×) or of
	// astral characters so escaped (3×) is rarer: an event it pushes past the bound
	// is cut, as one past it for any other reason.
	escapeFactor = 2
	// eventHeadroom is what such an event carries besides the answer: a Responses
	// event echoes the request's instructions and tool definitions (a coding agent's
	// are tens of KiB) and its metadata. It is also the floor for a small budget, so
	// that every event but one that repeats a long answer whole is read in full.
	eventHeadroom = 256 << 10
)

// EventBound is the data of one event (an SSE event's, an event stream frame's
// payload) that a decoder holding an answer to limit bytes (<= 0: DefaultMaxAnswer)
// reads whole: twice the limit for JSON escaping, plus 256 KiB for the fields around
// the answer — 2.25 MiB for the default limit. A longer event is cut: its framer keeps
// only its head and tail and goes on with the events after it, and its decoder
// keeps what the earlier events built (see Budget.Lost).
func EventBound(limit int) int {
	if limit <= 0 {
		limit = DefaultMaxAnswer
	}
	if limit > (math.MaxInt-eventHeadroom)/escapeFactor {
		return math.MaxInt
	}
	return escapeFactor*limit + eventHeadroom
}

// Budget bounds the bytes of one answer a decoder keeps for the record: its text,
// refusal, reasoning, tool call ids, names and arguments, and the blocks it keeps
// verbatim, counted together. What is past the limit is dropped and counted; once
// anything was dropped nothing more is kept, so the record is a prefix of the answer
// as it arrived, never one with holes. The decoder goes on reading events: whether
// the answer finished, its usage and its id do not depend on the budget. The
// relayed bytes are not its concern: the agent always gets the answer whole.
//
// The zero value allows DefaultMaxAnswer bytes. It is not safe for concurrent use.
type Budget struct {
	limit   int // 0: DefaultMaxAnswer
	used    int
	dropped int64
	cut     bool // something was dropped: keep nothing more
}

// Limit sets the bytes the answer may keep; n <= 0 means DefaultMaxAnswer. Decoders
// call it before the first Write.
func (b *Budget) Limit(n int) { b.limit = n }

// Truncated is how many bytes of the answer were dropped for the limit: 0 when the
// kept answer is whole, at least 1 when it is not.
func (b *Budget) Truncated() int64 {
	if b.cut && b.dropped == 0 {
		return 1
	}
	return b.dropped
}

// Lost counts an event of n bytes that the decoder could not read (longer than
// EventBound) and that held part of the answer: the answer is cut there, as when a
// part is dropped for the limit, and n is counted as dropped (the answer's bytes in
// it are fewer, but unknown).
func (b *Budget) Lost(n int64) {
	b.cut = true
	b.dropped += max(n, 0)
}

// Restart forgets what was kept and dropped (the limit stays): for a decoder whose
// next event replaces the whole answer (a Responses stream's final event).
func (b *Budget) Restart() { b.used, b.dropped, b.cut = 0, 0, false }

func (b *Budget) left() int {
	limit := b.limit
	if limit <= 0 {
		limit = DefaultMaxAnswer
	}
	return max(limit-b.used, 0)
}

// drop counts n bytes that were not kept.
func (b *Budget) drop(n int) {
	b.cut = true
	b.dropped += int64(n)
}

// Append appends to dst as much of s as the budget allows, cut at a UTF-8 boundary,
// and counts the rest as dropped. dst grows to at most what the budget allows, not
// to twice its length as append would.
func (b *Budget) Append(dst []byte, s string) []byte {
	keep := b.fit(s)
	if keep == 0 {
		return dst
	}
	if n := len(dst) + keep; n > cap(dst) {
		nb := make([]byte, len(dst), min(max(2*cap(dst), n), n+b.left()))
		copy(nb, dst)
		dst = nb
	}
	return append(dst, s[:keep]...)
}

// fit counts s against the budget and returns how many of its first bytes are kept:
// all, none once the answer was cut, else what is left cut at a UTF-8 boundary
// (never half a character).
func (b *Budget) fit(s string) int {
	if b.cut {
		b.drop(len(s))
		return 0
	}
	keep := len(s)
	if left := b.left(); keep > left {
		keep = left
		for keep > 0 && !utf8.RuneStart(s[keep]) {
			keep--
		}
		b.drop(len(s) - keep)
	}
	b.used += keep
	return keep
}

// fitWhole counts s against the budget: kept whole, or dropped whole.
func (b *Budget) fitWhole(s string) bool {
	if b.cut || len(s) > b.left() {
		b.drop(len(s))
		return false
	}
	b.used += len(s)
	return true
}

// Set replaces dst's bytes with s (an event that repeats a field whole): dst's bytes
// go back to the budget first. Once the answer was cut, dst stays as it is: s repeats
// bytes whose overflow was counted when they first came.
func (b *Budget) Set(dst []byte, s string) []byte {
	if b.cut {
		return dst
	}
	b.used -= len(dst)
	return b.Append(dst[:0], s)
}

// Clone returns a copy of s when it fits whole, else "" with s counted as dropped:
// for what cannot be cut (an id, a name, a block kept verbatim as JSON).
func (b *Budget) Clone(s string) string {
	if s == "" || !b.fitWhole(s) {
		return ""
	}
	return strings.Clone(s)
}

// Swap puts a copy of s in the place of kept bytes of length old (a whole item that
// replaces what its deltas built) when s fits there whole; false, s dropped and the
// old bytes still counted, when it does not.
func (b *Budget) Swap(old int, s string) (string, bool) {
	b.used -= old
	if b.fitWhole(s) {
		return strings.Clone(s), true
	}
	b.used += old
	return "", false
}

// Take reserves n bytes for what holds an answer's part (a tool call or block
// accumulator), so that a stream of ever new indexes cannot grow the decoder past
// the limit either; false, and the answer cut, when they do not fit.
func (b *Budget) Take(n int) bool {
	if b.cut || n > b.left() {
		b.drop(0)
		return false
	}
	b.used += n
	return true
}

// Trim cuts a message decoded whole (a non-streamed answer) to the budget, in the
// order of its fields: content, parts, tool calls, raw blocks. Text is cut; what
// cannot be cut (ids, names, inline media, raw JSON) is kept whole or dropped. When
// it cuts anything it returns the sketch of m whole, for stitching (nil when m fits:
// a whole answer is its own tip).
func (b *Budget) Trim(m *Message) *Sketch {
	var sk *Sketch
	if b.cut || answerBytes(m) > b.left() {
		sk = new(Sketch)
		sk.Of(m)
	}
	m.Content = b.trimString(m.Content)
	for i := range m.Parts {
		p := &m.Parts[i]
		p.Text = b.trimString(p.Text)
		p.Raw = RawJSON(b.whole(string(p.Raw)))
		if p.Media != nil && p.Media.Data != "" {
			md := *p.Media
			md.Data = b.whole(md.Data)
			p.Media = &md
		}
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		tc.ID, tc.Name = b.whole(tc.ID), b.whole(tc.Name)
		tc.Arguments = b.trimString(tc.Arguments)
	}
	kept := m.Raw[:0]
	for _, r := range m.Raw {
		if r = RawJSON(b.whole(string(r))); r != "" {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	m.Raw = kept
	return sk
}

// answerBytes is the bytes of m that Trim counts.
func answerBytes(m *Message) int {
	n := len(m.Content)
	for i := range m.Parts {
		p := &m.Parts[i]
		n += len(p.Text) + len(p.Raw)
		if p.Media != nil {
			n += len(p.Media.Data)
		}
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		n += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	for _, r := range m.Raw {
		n += len(r)
	}
	return n
}

// trimString is s cut to the budget: s itself when whole, else a copy of the part
// kept, so that it does not pin the rest.
func (b *Budget) trimString(s string) string {
	keep := b.fit(s)
	if keep == len(s) {
		return s
	}
	return strings.Clone(s[:keep])
}

// whole is s when it fits whole, else "" (counted as dropped).
func (b *Budget) whole(s string) string {
	if s == "" || !b.fitWhole(s) {
		return ""
	}
	return s
}
