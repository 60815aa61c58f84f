package protocol

import (
	"encoding/binary"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Sizes of a Sketch: enough to tell apart the answers of two runs at the same
// history (their tool-call ids differ; so, when sampled, do their first words), small
// enough to keep beside every answer decoded.
const (
	// SketchText is how many bytes of an answer's text, whitespace collapsed, a
	// Sketch keeps.
	SketchText = 256
	// SketchCalls is how many tool calls a Sketch keeps: those of the lowest indexes.
	SketchCalls = 8
)

// Sketch is what stitching needs of an answer whose recorded copy was cut (Budget):
// the agent sends the whole answer back with its next call, whose hash the cut copy
// cannot give, but its first bytes of text and its tool calls' ids and names, which a
// Sketch keeps, identify it as well among the answers given at one history. It is
// bounded (SketchText, SketchCalls) and fed beside the budget, whatever the budget
// cut: reasoning that came first and ate the budget does not take the text's first
// bytes with it.
//
// Decoders feed it as the answer arrives (Text, Call); Of gives the same of a whole
// message, so that an answer and its echo in the next call sketch alike (Sum64). What
// an agent's SDK re-serialises is left out or normalised as the stitching hash does:
// whitespace is collapsed (texts joined with "\n" or not sketch alike) and tool-call
// arguments, which Anthropic and Bedrock clients send back as re-spelt objects, are
// not kept.
//
// The zero value is the sketch of an empty answer. Not safe for concurrent use.
type Sketch struct {
	text    [SketchText]byte
	n       int
	started bool  // text was kept: whitespace before more text is one space
	space   bool  // whitespace (or a new block) since the last text kept
	block   int64 // the block of the last Text
	calls   [SketchCalls]sketchCall
	nc      int
}

// sketchCall is one tool call: the hashes of its id and name (0 until one is seen).
type sketchCall struct {
	index    int64
	id, name uint64
}

// Text adds text of the answer's text block block (a content block index, an output
// item…; 0 for an answer with one text). Texts of different blocks are apart, as
// the whole answer joins them with "\n".
func (s *Sketch) Text(block int64, t string) {
	if block != s.block {
		s.block = block
		s.space = s.space || s.started
	}
	for i := 0; i < len(t) && s.n < len(s.text); {
		c := t[i]
		if c < utf8.RuneSelf {
			if c <= ' ' && (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
				s.space = s.started
				i++
				continue
			}
			s.put(t[i : i+1])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(t[i:])
		if unicode.IsSpace(r) {
			s.space = s.started
		} else {
			s.put(t[i : i+size])
		}
		i += size
	}
}

// put keeps b, after the space that is due, as far as it fits.
func (s *Sketch) put(b string) {
	if s.space {
		s.space = false
		s.text[s.n] = ' '
		if s.n++; s.n == len(s.text) {
			return
		}
	}
	s.n += copy(s.text[s.n:], b)
	s.started = true
}

// Call adds what is known of the tool call at index (the stream's index of the call
// or block: only their order counts): its id and name, when not "". Decoders call it
// when a call's id or name arrives.
func (s *Sketch) Call(index int64, id, name string) {
	c := s.call(index)
	if c == nil {
		return
	}
	if id != "" {
		c.id = xxhash.Sum64String(id)
	}
	if name != "" {
		c.name = xxhash.Sum64String(name)
	}
}

// call returns the call at index, adding it in index order; nil when SketchCalls
// calls of lower indexes are kept.
func (s *Sketch) call(index int64) *sketchCall {
	i := 0
	for i < s.nc && s.calls[i].index < index {
		i++
	}
	if i < s.nc && s.calls[i].index == index {
		return &s.calls[i]
	}
	if i == len(s.calls) {
		return nil
	}
	if s.nc < len(s.calls) {
		s.nc++
	}
	copy(s.calls[i+1:s.nc], s.calls[i:s.nc-1]) // the call of the highest index falls out when full
	s.calls[i] = sketchCall{index: index}
	return &s.calls[i]
}

// Of sets s to the sketch of m, a whole answer or its echo in a later call. A call
// with neither id nor name is not kept: a decoder learns of a call from them.
func (s *Sketch) Of(m *Message) {
	*s = Sketch{}
	s.Text(0, m.Content)
	for i := range m.ToolCalls {
		if s.nc == len(s.calls) {
			break
		}
		if tc := &m.ToolCalls[i]; tc.ID != "" || tc.Name != "" {
			s.Call(int64(i), tc.ID, tc.Name)
		}
	}
}

// Sum64 is the hash of what s kept: equal for an answer and its echo, whatever the
// budget cut of the answer's decoded copy.
func (s *Sketch) Sum64() uint64 {
	var b [2 + SketchText + 16*SketchCalls]byte
	binary.LittleEndian.PutUint16(b[:], uint16(s.n))
	k := 2 + copy(b[2:], s.text[:s.n])
	for _, c := range s.calls[:s.nc] {
		binary.LittleEndian.PutUint64(b[k:], c.id)
		binary.LittleEndian.PutUint64(b[k+8:], c.name)
		k += 16
	}
	return xxhash.Sum64(b[:k])
}
