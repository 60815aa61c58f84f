package gemini

import (
	"strings"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// part holds the fields of one Part that the normalisation reads (by JSON name;
// proto names are mapped by canon). On duplicate keys the last one wins.
type part struct {
	text, thought, signature, inline, file, call, response gjson.Result
	other                                                  bool // a member of another kind: executableCode…
}

// readPart walks the members of one part once.
func readPart(b []byte, js string, v gjson.Result) part {
	var p part
	members(b, js, v.Index, func(key string, f gjson.Result) {
		switch canon(key) {
		case "text":
			p.text = f
		case "thought":
			p.thought = f
		case "thoughtSignature":
			p.signature = f
		case "inlineData":
			p.inline = f
		case "fileData":
			p.file = f
		case "functionCall":
			p.call = f
		case "functionResponse":
			p.response = f
		case "videoMetadata", "partMetadata", "mediaResolution":
			// Annotations of the part's data, not data of their own.
		default:
			p.other = true
		}
	})
	return p
}

// response is one functionResponse part.
type response struct{ id, name, content string }

// partsAcc is what the parts of one Content normalise to.
type partsAcc struct {
	model     bool // a model content: texts are fragments of one text
	text      textAcc
	all       []protocol.Part // text and media, in order
	media     bool
	calls     []protocol.ToolCall
	wire      []string // the calls' ids as sent ("" when none)
	responses []response
	raw       []protocol.RawJSON
	n         int  // parts
	other     bool // held anything but function responses
}

// textAcc joins texts: with "\n" for the texts of a user or system content (each a
// text of its own, as the other adapters join text parts), with nothing for a model
// content, whose text parts are pieces of one text — what Google's SDKs give as the
// answer's text, and what the stream decoders assemble.
type textAcc struct {
	concat bool
	j      jsontext.Joiner
	b      strings.Builder
}

func (t *textAcc) add(s string) {
	if t.concat {
		t.b.WriteString(s)
		return
	}
	t.j.Add(s)
}

func (t *textAcc) String() string {
	if t.concat {
		return t.b.String()
	}
	return t.j.String()
}

// readParts normalises the parts array of a Content of role ("user", "model",
// "system"). visit, when not nil, sees every text part that is not a thought.
//
//   - text parts are the content; thought parts (thought: true) are kept verbatim
//     in Raw, as the Anthropic adapter keeps thinking blocks;
//   - inlineData and fileData are image_url, input_audio or file parts by MIME type
//     (content then becomes the parts list, text parts included);
//   - functionCall parts are function calls, their ids derived when absent;
//   - functionResponse parts are tool messages (toolMessages);
//   - a thoughtSignature beside a call or a text is kept in Raw;
//   - any other part (executableCode, codeExecutionResult, kinds not known yet) is
//     kept verbatim in Raw.
func readParts(b []byte, js string, parts gjson.Result, role string, visit func(gjson.Result)) *partsAcc {
	c := &partsAcc{model: role == "model"}
	c.text.concat = c.model
	if !parts.IsArray() {
		return c
	}
	elements(b, js, parts.Index, func(v gjson.Result, _ int) {
		c.n++
		if !v.IsObject() {
			c.raw = append(c.raw, protocol.RawJSON(v.Raw))
			c.other = true
			return
		}
		p := readPart(b, js, v)
		c.add(&p, v.Raw, visit, b, js)
	})
	return c
}

// add normalises one part; raw is its JSON.
func (c *partsAcc) add(p *part, raw string, visit func(gjson.Result), b []byte, js string) {
	switch {
	case p.thought.Type == gjson.True || p.other:
		c.raw = append(c.raw, protocol.RawJSON(jsontext.Compact(raw)))
		c.other = true
		return
	case p.text.Type == gjson.String:
		if visit != nil {
			visit(p.text)
		}
		c.text.add(p.text.Str)
		c.all = append(c.all, protocol.Part{Type: protocol.PartText, Text: p.text.Str})
		c.other = true
	case p.call.IsObject():
		id, name, args := readFn(b, js, p.call)
		c.call(id.Str, name.Str, args.Raw)
		c.other = true
	case p.response.IsObject():
		id, name, resp := readFn(b, js, p.response)
		c.responses = append(c.responses, response{id: id.Str, name: name.Str, content: jsontext.Compact(resp.Raw)})
	case p.inline.IsObject() || p.file.IsObject():
		c.all = append(c.all, mediaPart(p))
		c.media, c.other = true, true
	case p.signature.Exists():
		// A part that is only a signature: kept whole below.
	default:
		c.raw = append(c.raw, protocol.RawJSON(jsontext.Compact(raw)))
		c.other = true
		return
	}
	if p.signature.Type == gjson.String {
		c.signature(p.signature.Str)
	}
}

// call adds a function call; id is the call's id as sent ("" when none), args its
// raw JSON arguments ("" when absent). The call is recorded under its derived id
// (derivedID), whatever id it was sent with.
func (c *partsAcc) call(wire, name, args string) {
	id := derivedID(name, len(c.calls))
	c.wire = append(c.wire, wire)
	if args == "" {
		args = "{}"
	}
	c.calls = append(c.calls, protocol.ToolCall{ID: id, Type: protocol.ToolFunction, Name: name, Arguments: jsontext.Compact(args)})
}

// signature keeps a thought signature, which has no place in the chat shape but
// must reach the model again for its reasoning to go on.
func (c *partsAcc) signature(sig string) {
	b := append([]byte(`{"thoughtSignature":`), protocol.AppendString(nil, sig)...)
	c.raw = append(c.raw, protocol.RawJSON(append(b, '}')))
	c.other = true
}

// held reports whether the content holds anything but function responses.
func (c *partsAcc) held() bool { return c.other }

// parts is the content's parts when it holds media; nil otherwise.
func (c *partsAcc) parts() []protocol.Part {
	if !c.media {
		return nil
	}
	return c.all
}

// toolMessages are the function responses as tool messages, each with the derived
// id of the call of the previous model content (calls, sent with the ids wire) it
// answers: the call sent with the response's id; for a response without one (or
// with an id no call has), the call that has its name, the first such call for the
// first such response — Gemini answers calls in order.
func (c *partsAcc) toolMessages(calls []protocol.ToolCall, wire []string) []protocol.Message {
	if len(c.responses) == 0 {
		return nil
	}
	out := make([]protocol.Message, 0, len(c.responses))
	seen := map[string]int{} // responses without id so far, by name
	for k, r := range c.responses {
		id := ""
		for i, w := range wire {
			if r.id != "" && w == r.id {
				id = calls[i].ID
				break
			}
		}
		if id == "" {
			id = derivedID(r.name, k)
			nth := seen[r.name]
			seen[r.name]++
			for _, tc := range calls {
				if tc.Name != r.name {
					continue
				}
				if nth == 0 {
					id = tc.ID
					break
				}
				nth--
			}
		}
		out = append(out, protocol.Message{Role: "tool", Content: r.content, ToolCallID: id, Name: r.name})
	}
	return out
}

// mediaPart is an inlineData or fileData part as a content part: image_url for an
// image, input_audio for audio (inline bytes), file for the rest.
func mediaPart(p *part) protocol.Part {
	src, inline := p.file, false
	if p.inline.IsObject() {
		src, inline = p.inline, true
	}
	var mimeType, data, uri, name gjson.Result
	src.ForEach(func(k, v gjson.Result) bool {
		switch canon(k.Str) {
		case "mimeType":
			mimeType = v
		case "data":
			data = v
		case "fileUri":
			uri = v
		case "displayName":
			name = v
		}
		return true
	})
	m := &protocol.Media{MediaType: mimeType.Str, Filename: name.Str}
	if inline {
		m.Data = data.Str
	} else {
		m.URL = uri.Str
	}
	major, minor, _ := strings.Cut(mimeType.Str, "/")
	switch {
	case major == "image":
		return protocol.Part{Type: protocol.PartImage, Media: m}
	case major == "audio" && inline:
		m.Format = minor
		return protocol.Part{Type: protocol.PartInputAudio, Media: m}
	}
	return protocol.Part{Type: protocol.PartFile, Media: m}
}

// readFn reads a functionCall or functionResponse: its id, its name, and its args or
// response.
func readFn(b []byte, js string, v gjson.Result) (id, name, payload gjson.Result) {
	members(b, js, v.Index, func(key string, f gjson.Result) {
		switch key {
		case "id":
			id = f
		case "name":
			name = f
		case "args", "response":
			payload = f
		}
	})
	return id, name, payload
}
