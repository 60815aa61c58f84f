package bedrock

import (
	"encoding/base64"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// convMessage normalises the content blocks of one Converse message (a union: each
// block has one member naming its kind), the same way for a request's messages and
// for an answer, so that an answer and its echo in the next call hash alike:
//
//   - text blocks are the content, joined with "\n";
//   - image, document and video blocks are image_url and file parts (content then
//     becomes the parts list, text blocks included);
//   - toolUse blocks are function calls;
//   - toolResult blocks are each a message of role "tool", handed to onResult in
//     order; their text, JSON and media are its content (kept raw when onResult is
//     nil: an answer);
//   - every other block — reasoningContent, cachePoint, guardContent,
//     citationsContent, kinds not known yet — is kept verbatim in Raw.
//
// visit, when not nil, sees each text. held reports whether the message holds
// anything but its tool results; blocks counts the elements of content.
func convMessage(role string, content gjson.Result, visit func(gjson.Result), onResult func(protocol.Message)) (m protocol.Message, held bool, blocks int) {
	m.Role = role
	if !content.IsArray() {
		return m, false, 0
	}
	var (
		text  jsontext.Joiner
		media bool
	)
	content.ForEach(func(_, b gjson.Result) bool {
		blocks++
		if !b.IsObject() {
			return true
		}
		known := false
		b.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "text":
				if v.Type != gjson.String {
					return true
				}
				known, held = true, true
				if visit != nil {
					visit(v)
				}
				text.Add(v.Str)
			case "toolUse":
				known, held = true, true
				m.ToolCalls = append(m.ToolCalls, readToolUse(v))
			case "toolResult":
				if onResult != nil {
					known = true
					onResult(readToolResult(v))
				}
			case "image", "document", "video":
				known, held, media = true, true, true
			}
			return true
		})
		if !known {
			m.Raw = append(m.Raw, protocol.RawJSON(b.Raw))
			held = true
		}
		return true
	})
	m.Content = text.String()
	if media {
		m.Parts = convParts(content)
	}
	return m, held, blocks
}

// convParts is a list of blocks as content parts: text (and a tool result's json)
// as text, image as image_url, document and video as file; other blocks are not
// parts.
func convParts(c gjson.Result) []protocol.Part {
	var parts []protocol.Part
	c.ForEach(func(_, b gjson.Result) bool {
		if !b.IsObject() {
			return true
		}
		b.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "text":
				if v.Type == gjson.String {
					parts = append(parts, protocol.Part{Type: protocol.PartText, Text: v.Str})
				}
			case "json": // a tool result's: text, as in its content
				parts = append(parts, protocol.Part{Type: protocol.PartText, Text: jsontext.Compact(v.Raw)})
			case "image", "document", "video":
				parts = append(parts, mediaPart(k.Str, v, b))
			}
			return true
		})
		return true
	})
	return parts
}

// mediaPart reads {format, name?, source: {bytes | s3Location: {uri} | text}}; a
// source it cannot hold (a document of content blocks) keeps the block verbatim.
func mediaPart(kind string, v, block gjson.Result) protocol.Part {
	var format, name, source gjson.Result
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "format":
			format = f
		case "name":
			name = f
		case "source":
			source = f
		}
		return true
	})
	m := &protocol.Media{MediaType: mediaType(kind, format.Str), Filename: name.Str}
	ok := false
	source.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "bytes":
			m.Data, ok = f.Str, true
		case "s3Location":
			m.URL, ok = jsontext.ObjectKey(f, "uri").Str, true
		case "text":
			m.Data, ok = base64.StdEncoding.EncodeToString([]byte(f.Str)), true
			if m.MediaType == "" {
				m.MediaType = "text/plain"
			}
		}
		return true
	})
	if !ok {
		return protocol.Part{Type: kind, Raw: protocol.RawJSON(block.Raw)}
	}
	typ := protocol.PartFile
	if kind == "image" {
		typ = protocol.PartImage
	}
	return protocol.Part{Type: typ, Media: m}
}

// mediaType is the MIME type of a Converse format.
func mediaType(kind, format string) string {
	format = strings.ToLower(format)
	switch kind {
	case "image":
		if format == "jpg" {
			format = "jpeg"
		}
		return "image/" + format
	case "video":
		if t, ok := videoTypes[format]; ok {
			return t
		}
		return "video/" + format
	}
	return docTypes[format]
}

var docTypes = map[string]string{
	"pdf": "application/pdf", "csv": "text/csv", "doc": "application/msword",
	"docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	"xls":  "application/vnd.ms-excel",
	"xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	"html": "text/html", "txt": "text/plain", "md": "text/markdown",
}

var videoTypes = map[string]string{
	"mkv": "video/x-matroska", "mov": "video/quicktime", "mp4": "video/mp4", "webm": "video/webm",
	"flv": "video/x-flv", "mpeg": "video/mpeg", "mpg": "video/mpeg", "wmv": "video/x-ms-wmv", "three_gp": "video/3gpp",
}
