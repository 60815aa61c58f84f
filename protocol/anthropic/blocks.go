package anthropic

import (
	"encoding/base64"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// blockMessage normalises the content blocks of one message to the chat shape, the
// same way for a request's messages and for an answer, so that an answer and its
// echo in the next call hash alike:
//
//   - text blocks are the content, joined with "\n";
//   - image and document blocks are image_url and file parts (content then becomes
//     the parts list, text blocks included);
//   - tool_use blocks are function calls;
//   - tool_result blocks (user messages) are each a message of role "tool", handed to
//     toolResult in order; their text and media are its content;
//   - every other block — thinking, redacted_thinking, server_tool_use,
//     web_search_tool_result and the other server tools' results, types not known
//     yet — is kept verbatim in Raw.
//
// visit, when not nil, sees each text of a text block. held reports whether the
// message holds anything but its tool results.
func blockMessage(role string, content gjson.Result, visit func(gjson.Result), toolResult func(protocol.Message)) (m protocol.Message, held bool) {
	m.Role = role
	if !content.IsArray() {
		return m, false
	}
	var (
		text  jsontext.Joiner
		media bool
	)
	content.ForEach(func(_, v gjson.Result) bool {
		b := readBlock(v)
		switch b.typ.Str {
		case "text":
			if !b.isText() {
				m.Raw = append(m.Raw, protocol.RawJSON(v.Raw)) // malformed, kept as it came
				held = true
				break
			}
			if visit != nil {
				visit(b.text)
			}
			text.Add(b.text.Str)
			held = true
		case "image", "document":
			media, held = true, true
		case "tool_use":
			m.ToolCalls = append(m.ToolCalls, b.toolCall())
			held = true
		case "tool_result":
			if toolResult == nil {
				m.Raw = append(m.Raw, protocol.RawJSON(v.Raw))
				held = true
				break
			}
			// is_error has no place in the chat shape: the content says what failed.
			c, parts := blocksParts(b.content)
			toolResult(protocol.Message{Role: "tool", Content: c, Parts: parts, ToolCallID: b.toolUseID.Str})
		default:
			if v.IsObject() {
				m.Raw = append(m.Raw, protocol.RawJSON(v.Raw))
				held = true
			}
		}
		return true
	})
	m.Content = text.String()
	if media {
		m.Parts = contentParts(content)
	}
	return m, held
}

// blocksParts is the text of a string or of a list of blocks (see blocksText) and,
// when the list holds an image or a document, the list as parts.
func blocksParts(c gjson.Result) (string, []protocol.Part) {
	text, _ := blocksText(c, nil)
	if !c.IsArray() {
		return text, nil
	}
	media := false
	c.ForEach(func(_, v gjson.Result) bool {
		t := jsontext.ObjectKey(v, "type").Str
		media = t == "image" || t == "document"
		return !media
	})
	if !media {
		return text, nil
	}
	return text, contentParts(c)
}

// contentParts is a list of blocks as content parts: text blocks as text, image
// blocks as image_url, document blocks as file; other blocks (which have a place
// of their own: calls, results, raw) are not parts.
func contentParts(c gjson.Result) []protocol.Part {
	var parts []protocol.Part
	c.ForEach(func(_, v gjson.Result) bool {
		b := readBlock(v)
		switch b.typ.Str {
		case "text":
			if b.isText() {
				parts = append(parts, protocol.Part{Type: protocol.PartText, Text: b.text.Str})
			}
		case "image":
			if m := sourceMedia(b.source); m != nil {
				parts = append(parts, protocol.Part{Type: protocol.PartImage, Media: m})
			} else {
				parts = append(parts, protocol.Part{Type: "image", Raw: protocol.RawJSON(v.Raw)})
			}
		case "document":
			if m := sourceMedia(b.source); m != nil {
				m.Filename = b.title.Str
				parts = append(parts, protocol.Part{Type: protocol.PartFile, Media: m})
			} else {
				parts = append(parts, protocol.Part{Type: "document", Raw: protocol.RawJSON(v.Raw)})
			}
		}
		return true
	})
	return parts
}

// sourceMedia reads a block's source: base64 bytes, a URL, a file id, or plain text
// (a text document, its bytes then base64-encoded like any other). nil for a source
// it cannot hold (a document made of content blocks).
func sourceMedia(src gjson.Result) *protocol.Media {
	if !src.IsObject() {
		return nil
	}
	var typ, mediaType, data, url, fileID gjson.Result
	src.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "media_type":
			mediaType = v
		case "data":
			data = v
		case "url":
			url = v
		case "file_id":
			fileID = v
		}
		return true
	})
	switch typ.Str {
	case "base64":
		return &protocol.Media{MediaType: mediaType.Str, Data: data.Str}
	case "url":
		return &protocol.Media{URL: url.Str}
	case "file":
		return &protocol.Media{FileID: fileID.Str}
	case "text":
		mt := mediaType.Str
		if mt == "" {
			mt = "text/plain"
		}
		return &protocol.Media{MediaType: mt, Data: base64.StdEncoding.EncodeToString([]byte(data.Str))}
	}
	return nil
}
