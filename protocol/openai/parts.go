package openai

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// extras adds to m what its message holds beyond text and tool calls: the content
// parts when one is not text (image_url, input_audio, file, refusal…), a refusal
// field as a refusal part, and reasoning that servers of open models send beside
// the content (reasoning_content, reasoning) verbatim in Raw. arrayParts is the
// number of elements of an array content (contentText's count).
func (f *fields) extras(m *protocol.Message, arrayParts int) {
	if arrayParts > 0 {
		m.Parts = chatParts(f.content)
	}
	if f.refusal.Type == gjson.String && f.refusal.Str != "" {
		if m.Parts == nil && m.Content != "" {
			m.Parts = []protocol.Part{{Type: protocol.PartText, Text: m.Content}}
		}
		m.Parts = append(m.Parts, protocol.Part{Type: protocol.PartRefusal, Text: f.refusal.Str})
	}
	for _, r := range [...]struct {
		key string
		v   gjson.Result
	}{{"reasoning_content", f.reasoningContent}, {"reasoning", f.reasoning}} {
		if r.v.Exists() && r.v.Type != gjson.Null && r.v.Raw != `""` {
			m.Raw = append(m.Raw, reasoningRaw(r.key, r.v.Raw))
		}
	}
}

// reasoningRaw is {key: value} as one raw item.
func reasoningRaw(key, value string) protocol.RawJSON {
	b := make([]byte, 0, len(key)+len(value)+5)
	b = append(b, '{')
	b = protocol.AppendString(b, key)
	b = append(b, ':')
	b = append(b, value...)
	return protocol.RawJSON(append(b, '}'))
}

// chatParts is an array content as parts, or nil when every part is text (the
// content is then the string of its texts).
func chatParts(c gjson.Result) []protocol.Part {
	media := false
	c.ForEach(func(_, p gjson.Result) bool {
		_, ok := textPart(p)
		media = !ok && p.IsObject()
		return !media
	})
	if !media {
		return nil
	}
	var parts []protocol.Part
	c.ForEach(func(_, p gjson.Result) bool {
		if t, ok := textPart(p); ok {
			parts = append(parts, protocol.Part{Type: protocol.PartText, Text: t.Str})
			return true
		}
		if p.IsObject() {
			parts = append(parts, chatPart(p))
		}
		return true
	})
	return parts
}

// chatPart reads one non-text part: {type: image_url, image_url: {url, detail}},
// {type: input_audio, input_audio: {data, format}}, {type: file, file: {file_id,
// file_data, filename}}, {type: refusal, refusal}; another is kept verbatim.
func chatPart(p gjson.Result) protocol.Part {
	var typ, image, audio, file, refusal gjson.Result
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "image_url":
			image = v
		case "input_audio":
			audio = v
		case "file":
			file = v
		case "refusal":
			refusal = v
		}
		return true
	})
	switch typ.Str {
	case protocol.PartImage:
		m := &protocol.Media{}
		url := image // a bare string is accepted by some servers
		if image.IsObject() {
			url = image.Get("url")
			m.Detail = image.Get("detail").Str
		}
		if mt, data, ok := protocol.ParseDataURL(url.Str); ok {
			m.MediaType, m.Data = mt, data
		} else {
			m.URL = url.Str
		}
		return protocol.Part{Type: protocol.PartImage, Media: m}
	case protocol.PartInputAudio:
		m := &protocol.Media{Data: audio.Get("data").Str, Format: audio.Get("format").Str}
		if m.Format != "" {
			m.MediaType = "audio/" + m.Format
		}
		return protocol.Part{Type: protocol.PartInputAudio, Media: m}
	case protocol.PartFile:
		m := &protocol.Media{FileID: file.Get("file_id").Str, Filename: file.Get("filename").Str}
		if mt, data, ok := protocol.ParseDataURL(file.Get("file_data").Str); ok {
			m.MediaType, m.Data = mt, data
		} else {
			m.Data = file.Get("file_data").Str // bare base64
		}
		return protocol.Part{Type: protocol.PartFile, Media: m}
	case protocol.PartRefusal:
		if refusal.Type == gjson.String {
			return protocol.Part{Type: protocol.PartRefusal, Text: refusal.Str}
		}
	}
	return protocol.Part{Type: typ.Str, Raw: protocol.RawJSON(p.Raw)}
}
