package gemini

import (
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// answer assembles an answer from GenerateContentResponse objects: the one body of
// generateContent, or the chunks of a stream, each of which carries the next parts
// of candidates[0] (text fragments, whole function calls) and the usage so far.
type answer struct {
	text       []byte
	thought    []byte // the thought parts' text
	sawThought bool
	calls      []protocol.ToolCall
	raw        []protocol.RawJSON
	usage      protocol.Usage
	done       bool // a candidate's finishReason, or a blocked prompt, arrived
	failed     bool // an error object arrived
	budget     protocol.Budget
	sketch     protocol.Sketch
}

// callSize is what a call costs the budget besides its strings.
const callSize = int(unsafe.Sizeof(protocol.ToolCall{}))

// chunk applies one GenerateContentResponse (or an error object). Malformed chunks
// are skipped.
func (a *answer) chunk(data []byte) {
	if jsontext.Validate(data) != nil {
		return
	}
	js := string(data)
	i := jsontext.SkipWS(data, 0)
	if data[i] != '{' {
		return
	}
	var candidates, usage, feedback gjson.Result
	members(data, js, i, func(key string, v gjson.Result) {
		switch canon(key) {
		case "candidates":
			candidates = v
		case "usageMetadata":
			usage = v
		case "promptFeedback":
			feedback = v
		case "error":
			a.failed = true
		}
	})
	if usage.IsObject() {
		a.readUsage(usage)
	}
	if jsontext.ObjectKey(feedback, "blockReason").Str != "" || jsontext.ObjectKey(feedback, "block_reason").Str != "" {
		a.done = true // the prompt was blocked: the answer is that there is none
	}
	if !candidates.IsArray() {
		return
	}
	first := true
	elements(data, js, candidates.Index, func(c gjson.Result, _ int) {
		// candidates[0] only: agents ask for one (candidateCount defaults to 1).
		if first && c.IsObject() {
			a.candidate(data, js, c)
		}
		first = false
	})
}

// candidate applies one chunk's candidate: its content's parts and finishReason.
func (a *answer) candidate(b []byte, js string, c gjson.Result) {
	var content gjson.Result
	members(b, js, c.Index, func(key string, v gjson.Result) {
		switch canon(key) {
		case "content":
			content = v
		case "finishReason":
			if v.Type == gjson.String && v.Str != "" {
				a.done = true
			}
		}
	})
	if !content.IsObject() {
		return
	}
	var parts gjson.Result
	members(b, js, content.Index, func(key string, v gjson.Result) {
		if key == "parts" {
			parts = v
		}
	})
	if !parts.IsArray() {
		return
	}
	elements(b, js, parts.Index, func(v gjson.Result, _ int) {
		if !v.IsObject() {
			return
		}
		p := readPart(b, js, v)
		a.part(b, js, &p, v.Raw)
	})
}

// part applies one part of the answer, normalised as readParts normalises a model
// content; media the model made (image generation) is kept in Raw.
func (a *answer) part(b []byte, js string, p *part, raw string) {
	switch {
	case p.thought.Type == gjson.True && p.text.Type == gjson.String && !p.other:
		a.thought = a.budget.Append(a.thought, p.text.Str)
		a.sawThought = true
	case p.text.Type == gjson.String && !p.other && p.thought.Type != gjson.True:
		a.text = a.budget.Append(a.text, p.text.Str)
		a.sketch.Text(0, p.text.Str)
	case p.call.IsObject() && !p.other:
		// The call's id, when the answer has one, is not what it is recorded under:
		// its echo may carry another (derivedID).
		_, name, args := readFn(b, js, p.call)
		k := len(a.calls)
		callID := derivedID(name.Str, k)
		a.sketch.Call(int64(k), callID, name.Str)
		if !a.budget.Take(callSize) {
			return
		}
		argsRaw := args.Raw
		if argsRaw == "" {
			argsRaw = "{}"
		}
		a.calls = append(a.calls, protocol.ToolCall{
			ID: a.budget.Clone(callID), Type: protocol.ToolFunction, Name: a.budget.Clone(name.Str),
			Arguments: a.budget.Clone(jsontext.Compact(argsRaw)),
		})
	case p.signature.Exists() && !p.other && !p.inline.Exists() && !p.file.Exists() && !p.response.Exists():
		// A part that is only a signature (the stream's last part, after the text).
	default:
		if r := a.budget.Clone(jsontext.Compact(raw)); r != "" {
			a.raw = append(a.raw, protocol.RawJSON(r))
		}
		return
	}
	if p.signature.Type == gjson.String {
		b := append([]byte(`{"thoughtSignature":`), protocol.AppendString(nil, p.signature.Str)...)
		if r := a.budget.Clone(string(append(b, '}'))); r != "" {
			a.raw = append(a.raw, protocol.RawJSON(r))
		}
	}
}

// readUsage reads usageMetadata: each chunk carries the counts so far, so the last
// one read is the call's. Input counts the prompt and what tools added to it;
// output counts the candidates and the thoughts (OpenAI's completion_tokens counts
// reasoning too).
func (a *answer) readUsage(v gjson.Result) {
	var u protocol.Usage
	v.ForEach(func(k, n gjson.Result) bool {
		switch k.Str {
		case "promptTokenCount", "prompt_token_count", "toolUsePromptTokenCount", "tool_use_prompt_token_count":
			u.InputTokens += n.Int()
		case "candidatesTokenCount", "candidates_token_count", "thoughtsTokenCount", "thoughts_token_count":
			u.OutputTokens += n.Int()
		}
		return true
	})
	a.usage = u
}

// message is the answer assembled so far: role "assistant", the text fragments
// joined as they came, the function calls in order, the thoughts (one thought part)
// and the other parts in Raw.
func (a *answer) message() protocol.Message {
	m := protocol.Message{Role: "assistant", Content: string(a.text)}
	if len(a.calls) > 0 {
		m.ToolCalls = append([]protocol.ToolCall(nil), a.calls...)
	}
	if a.sawThought {
		b := protocol.AppendString([]byte(`{"text":`), string(a.thought))
		m.Raw = append(m.Raw, protocol.RawJSON(append(b, `,"thought":true}`...)))
	}
	m.Raw = append(m.Raw, a.raw...)
	return m
}

// Decoder returns a fresh decoder for this call's answer, by its framing.
func (r *Request) Decoder() protocol.Decoder { return NewDecoder(r.framing) }

// NewDecoder returns a decoder of an answer of framing f.
func NewDecoder(f Framing) protocol.Decoder {
	switch f {
	case FrameSSE:
		return &StreamDecoder{}
	case FrameArray:
		return &ArrayDecoder{}
	}
	return &JSONDecoder{}
}
