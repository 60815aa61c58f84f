// Package openai is the adapter for OpenAI chat completions: it reads a request body
// into a protocol view, splices context into it by byte insertion, and decodes answers
// (JSON and SSE streams) into normalised messages.
//
// Nothing here re-marshals a body: reading goes through gjson, which reports the raw
// byte offset of every value, and writing is a single insertion at such an offset, so
// that every byte the client sent reaches the upstream unchanged.
package openai

import (
	"sync"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// Request is the read-only view of a /v1/chat/completions body.
type Request struct {
	protocol.View // Model, Stream, Messages (normalised), Task ("" when no rule matched)

	// bodyLen is the length of the parsed body: SpliceTo refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	// arrOpen is the offset of the '[' that opens the messages array.
	arrOpen int
	// task says where the task sits; meaningful only when Task != "".
	task taskSpot
	// sys says where the System placement appends.
	sys anchor
}

// taskSpot locates the task inside the raw body.
type taskSpot struct {
	msg    int // index of the task message in messages
	part   int // index of the content part holding the anchor, -1 for string content
	at     int // raw offset right after the task text (AppendToTask inserts here)
	msgEnd int // raw offset right after the task message object (NewMessage inserts here)
}

// Parse reads an OpenAI chat completions body. rules are tried in order; the first
// that matches sets Task. A body whose task no rule finds parses fine with Task "".
func Parse(body []byte, rules []protocol.TaskRule) (*Request, error) {
	// Elements sent before are validated once, when first read (memo).
	hits := memo.Hits()
	defer hits.Release()
	// Read in place, never retained: the model is copied, and messages are read from
	// private copies of their bytes (readMessages), so the view stays valid after the
	// caller reuses its buffer.
	js, start, err := jsontext.Object(body, hits)
	if err != nil {
		return nil, err
	}
	r := &Request{bodyLen: len(body), task: taskSpot{msg: -1}}
	msgs := -1
	var side protocol.SideReader
	// Last key wins on duplicates, as in the Python and Go decoders upstream.
	jsontext.Members(body, js, start, func(key string, v int) int {
		switch key {
		case "model":
			var end int
			r.Model, end = jsontext.CloneString(body, js, v) // "" unless a string
			return end
		case "stream":
			r.Stream = body[v] == 't'
		case "messages":
			msgs = v
			if body[v] == '[' {
				// Read here rather than after the walk: the array is most of the body,
				// and this way it is walked once.
				r.arrOpen = v
				return r.readMessages(body, hits)
			}
		default:
			// What side-call rules read, collected here rather than by a walk of
			// their own over the body (protocol.MatchSideCall).
			if protocol.SideKey(key) {
				res, end := jsontext.ResultAt(body, js, v)
				side.Member(key, res)
				return end
			}
		}
		return -1
	})
	if msgs < 0 || body[msgs] != '[' {
		return nil, protocol.Missing("messages", "an array")
	}
	r.Side = side.Facts()
	// The texts task rules read live only for this call: their slices are reused.
	els := hits.Walked()
	r.setMessages(els)
	sc := scratchPool.Get().(*scratch)
	sc.segs, sc.ps = r.findTask(rules, body, els, hits.Remembered, sc.segs[:0], sc.ps[:0])
	clear(sc.segs) // they alias remembered elements: not kept alive by the pool
	clear(sc.ps)
	scratchPool.Put(sc)
	return r, nil
}

// scratch is what one parse uses and drops: the texts task rules read.
type scratch struct {
	segs []segment
	ps   []protocol.Segment
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// validate reports whether body is one JSON document that gjson may walk safely.
