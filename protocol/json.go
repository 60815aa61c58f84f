package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// MarshalJSON writes the OpenAI chat message: role, content (the string Content, or
// the content-parts array when Parts is set), tool_calls, tool_call_id, name, and raw
// (the items the shape cannot hold, verbatim). HTML is not escaped here: an encoder
// that escapes it does so when it copies this output.
func (m Message) MarshalJSON() ([]byte, error) {
	return m.AppendJSON(make([]byte, 0, m.JSONSize())), nil
}

// JSONSize is about how many bytes AppendJSON writes for m: its strings' lengths and
// the keys around them, with room for a little escaping. A buffer sized by it is
// grown at most once (a text of quotes and newlines escapes to more).
func (m *Message) JSONSize() int {
	n := 48 + len(m.Role) + len(m.Content) + len(m.ToolCallID) + len(m.Name)
	for i := range m.Parts {
		p := &m.Parts[i]
		n += 64 + len(p.Type) + len(p.Text) + len(p.Raw)
		if md := p.Media; md != nil {
			n += 64 + len(md.URL) + len(md.Data) + len(md.FileID) + len(md.Filename) + len(md.SHA256) + len(md.MediaType)
		}
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		n += 64 + len(tc.ID) + len(tc.Type) + len(tc.Name) + len(tc.Arguments)
	}
	for _, r := range m.Raw {
		n += 1 + len(r)
	}
	return n + n/16
}

// AppendJSON appends the message's JSON (MarshalJSON) to b.
func (m *Message) AppendJSON(b []byte) []byte {
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	b = append(b, `,"content":`...)
	if m.Parts != nil {
		b = append(b, '[')
		for i := range m.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			b = m.Parts[i].appendJSON(b)
		}
		b = append(b, ']')
	} else {
		b = appendString(b, m.Content)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = m.ToolCalls[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	if m.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, m.Name)
	}
	if len(m.Raw) > 0 {
		b = append(b, `,"raw":[`...)
		for i, r := range m.Raw {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// UnmarshalJSON reads an OpenAI chat message. It also reads the messages of replay
// events written before tool calls took the OpenAI shape (see ToolCall.UnmarshalJSON).
func (m *Message) UnmarshalJSON(data []byte) error {
	var w struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []ToolCall      `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
		Name       string          `json:"name"`
		Raw        []RawJSON       `json:"raw"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID, Name: w.Name, Raw: w.Raw}
	c := bytes.TrimSpace(w.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		if err := json.Unmarshal(c, &m.Parts); err != nil {
			return fmt.Errorf("message content: %w", err)
		}
		if m.Parts == nil {
			m.Parts = []Part{}
		}
		m.Content = PartsText(m.Parts)
		if !HasMedia(m.Parts) {
			m.Parts = nil // a list of texts is the string Content
		}
	default:
		return fmt.Errorf("message content is neither a string, a list of parts nor null: %.40s", c)
	}
	return nil
}

// PartsText is the text of a list of parts: its text parts joined with "\n".
func PartsText(parts []Part) string {
	var out strings.Builder
	n := 0
	for _, p := range parts {
		if p.Type != PartText {
			continue
		}
		if n > 0 {
			out.WriteByte('\n')
		}
		out.WriteString(p.Text)
		n++
	}
	return out.String()
}

// HasMedia reports whether parts hold any part but text: only then are they kept
// as parts rather than as the string of their text.
func HasMedia(parts []Part) bool {
	for _, p := range parts {
		if p.Type != PartText {
			return true
		}
	}
	return false
}

// MarshalJSON writes {"id","type":"function","function":{"name","arguments"}}, or
// {"id","type":"custom","custom":{"name","input"}} for a custom tool call, exactly as
// OpenAI's chat completions API writes them.
func (tc ToolCall) MarshalJSON() ([]byte, error) {
	return tc.appendJSON(make([]byte, 0, 64+len(tc.Arguments))), nil
}

func (tc ToolCall) appendJSON(b []byte) []byte {
	typ := tc.Type
	if typ == "" {
		typ = ToolFunction
	}
	b = append(b, `{"id":`...)
	b = appendString(b, tc.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	if typ == ToolCustom {
		b = append(b, `,"custom":{"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"input":`...)
	} else {
		b = append(b, `,"function":{"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"arguments":`...)
	}
	b = appendString(b, tc.Arguments)
	return append(b, "}}"...)
}

// UnmarshalJSON reads the OpenAI shape and, for the replay events written before it
// (schema v1 as first released), the flat {id, type, name, arguments}.
func (tc *ToolCall) UnmarshalJSON(data []byte) error {
	type fn struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Input     string          `json:"input"`
	}
	var w struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Function  *fn             `json:"function"`
		Custom    *fn             `json:"custom"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*tc = ToolCall{ID: w.ID, Type: w.Type, Name: w.Name}
	args := w.Arguments
	switch {
	case w.Custom != nil:
		tc.Name, tc.Arguments = w.Custom.Name, w.Custom.Input
		if tc.Type == "" {
			tc.Type = ToolCustom
		}
		return nil
	case w.Function != nil:
		tc.Name, args = w.Function.Name, w.Function.Arguments
	}
	if tc.Type == "" {
		tc.Type = ToolFunction
	}
	var err error
	tc.Arguments, err = argumentsText(args)
	return err
}

// argumentsText is arguments as text: a JSON string decoded; an object (some writers
// put the object itself) as its compact JSON.
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return "", err
	}
	return c.String(), nil
}

// MarshalJSON writes the value as it is; an empty RawJSON is null.
func (r RawJSON) MarshalJSON() ([]byte, error) { return r.appendJSON(nil), nil }

func (r RawJSON) appendJSON(b []byte) []byte {
	if r == "" {
		return append(b, "null"...)
	}
	return append(b, r...)
}

// UnmarshalJSON keeps the value's bytes.
func (r *RawJSON) UnmarshalJSON(data []byte) error {
	*r = RawJSON(bytes.TrimSpace(data))
	return nil
}

// MarshalJSON writes the OpenAI content part; see Part.
func (p Part) MarshalJSON() ([]byte, error) { return p.appendJSON(nil), nil }

// appendJSON writes
//
//	{"type":"text","text":…}, {"type":"refusal","refusal":…},
//	{"type":"image_url","image_url":{"url","detail"}},
//	{"type":"input_audio","input_audio":{"data","format"}},
//	{"type":"file","file":{"file_id","filename","file_data"}}
//
// with, for media whose bytes were dropped, "sha256" and "media_type" in place of the
// bytes (a data URL, data, file_data), and "media_type", "file_url" where the shape has
// no key of its own for them. A part of another type is written as it came.
func (p Part) appendJSON(b []byte) []byte {
	if p.Raw != "" {
		return p.Raw.appendJSON(b) // a part kept as it came
	}
	switch p.Type {
	case PartText, PartRefusal:
		b = append(b, `{"type":`...)
		b = appendString(b, p.Type)
		b = append(b, ',')
		b = appendString(b, p.Type)
		b = append(b, ':')
		b = appendString(b, p.Text)
		return append(b, '}')
	case PartImage, PartInputAudio, PartFile:
	default:
		b = append(b, `{"type":`...)
		b = appendString(b, p.Type)
		return append(b, '}')
	}
	m := p.Media
	if m == nil {
		m = &Media{}
	}
	b = append(b, `{"type":`...)
	b = appendString(b, p.Type)
	b = append(b, ',')
	b = appendString(b, p.Type)
	b = append(b, ":{"...)
	var o object
	switch p.Type {
	case PartImage:
		url := m.URL
		if m.Data != "" {
			url = DataURL(m.MediaType, m.Data)
		}
		b = o.field(b, "url", url)
		b = o.field(b, "detail", m.Detail)
		b = o.field(b, "file_id", m.FileID)
	case PartInputAudio:
		b = o.field(b, "data", m.Data)
		b = o.field(b, "format", m.Format)
		b = o.field(b, "url", m.URL)
	case PartFile:
		b = o.field(b, "file_id", m.FileID)
		b = o.field(b, "filename", m.Filename)
		if m.Data != "" {
			b = o.field(b, "file_data", DataURL(m.MediaType, m.Data))
		}
		b = o.field(b, "file_url", m.URL)
	}
	b = o.field(b, "sha256", m.SHA256)
	if m.Data == "" || p.Type == PartInputAudio {
		b = o.field(b, "media_type", m.MediaType)
	}
	return append(b, "}}"...)
}

// object writes the members of a JSON object, skipping empty values.
type object struct{ n int }

func (o *object) field(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	if o.n > 0 {
		b = append(b, ',')
	}
	o.n++
	b = appendString(b, key)
	b = append(b, ':')
	return appendString(b, v)
}

// UnmarshalJSON reads an OpenAI content part (as MarshalJSON writes it). A part it
// cannot read as its type says is kept verbatim, as a part of an unknown type is.
func (p *Part) UnmarshalJSON(data []byte) error {
	if err := p.unmarshal(data); err != nil {
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(data, &head)
		*p = Part{Type: head.Type, Raw: RawJSON(bytes.TrimSpace(data))}
	}
	return nil
}

func (p *Part) unmarshal(data []byte) error {
	type media struct {
		URL       string `json:"url"`
		Detail    string `json:"detail"`
		FileID    string `json:"file_id"`
		Data      string `json:"data"`
		Format    string `json:"format"`
		Filename  string `json:"filename"`
		FileData  string `json:"file_data"`
		FileURL   string `json:"file_url"`
		SHA256    string `json:"sha256"`
		MediaType string `json:"media_type"`
	}
	var w struct {
		Type       string `json:"type"`
		Text       string `json:"text"`
		Refusal    string `json:"refusal"`
		ImageURL   *media `json:"image_url"`
		InputAudio *media `json:"input_audio"`
		File       *media `json:"file"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*p = Part{Type: w.Type}
	var src *media
	switch w.Type {
	case PartText:
		p.Text = w.Text
		return nil
	case PartRefusal:
		p.Text = w.Refusal
		return nil
	case PartImage:
		src = w.ImageURL
	case PartInputAudio:
		src = w.InputAudio
	case PartFile:
		src = w.File
	default:
		p.Raw = RawJSON(bytes.TrimSpace(data))
		return nil
	}
	if src == nil {
		src = &media{}
	}
	m := &Media{FileID: src.FileID, Detail: src.Detail, Format: src.Format, Filename: src.Filename,
		SHA256: src.SHA256, MediaType: src.MediaType, Data: src.Data}
	switch w.Type {
	case PartImage:
		m.URL = src.URL
		if mt, data, ok := ParseDataURL(src.URL); ok {
			m.URL, m.MediaType, m.Data = "", mt, data
		}
	case PartInputAudio:
		m.URL = src.URL
	case PartFile:
		m.URL = src.FileURL
		if mt, data, ok := ParseDataURL(src.FileData); ok {
			m.MediaType, m.Data = mt, data
		}
	}
	p.Media = m
	return nil
}

// DataURL is the data URL of base64 bytes.
func DataURL(mediaType, data string) string {
	return "data:" + mediaType + ";base64," + data
}

// ParseDataURL splits a data URL ("data:image/png;base64,…") into its media type and
// its bytes, base64-encoded (a URL that is not base64 has its percent-decoded bytes
// encoded); ok is false for anything but a data URL.
func ParseDataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	head, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, b64 := strings.CutSuffix(head, ";base64")
	if i := strings.IndexByte(mediaType, ';'); i >= 0 {
		mediaType = mediaType[:i] // parameters (charset, name) are not the type
	}
	if !b64 {
		raw, err := url.PathUnescape(data)
		if err != nil {
			raw = data
		}
		data = base64.StdEncoding.EncodeToString([]byte(raw))
	}
	return mediaType, data, true
}

// StripMedia returns msgs with the bytes of every media part replaced by their
// SHA-256 (of the decoded bytes; of the text when it is not base64): what the replay
// buffer records unless it is told to keep media. In items kept verbatim (Raw, and
// parts of unknown types) a base64 data URL becomes "data:TYPE;sha256,HEX", and the
// base64 image of an image_generation_call's result "sha256:HEX". msgs is not
// modified; messages without media are shared, not copied.
func StripMedia(msgs []Message) []Message {
	out := msgs
	copied := false
	for i := range msgs {
		m := &msgs[i]
		if !hasMedia(m) {
			continue
		}
		if !copied {
			out = append([]Message(nil), msgs...)
			copied = true
		}
		if m.Parts != nil {
			parts := append([]Part(nil), m.Parts...)
			for j := range parts {
				if parts[j].Raw != "" {
					parts[j].Raw = stripRaw(parts[j].Raw)
				}
				if parts[j].Media == nil || parts[j].Media.Data == "" {
					continue
				}
				md := *parts[j].Media
				md.SHA256, md.Data = hashData(md.Data), ""
				parts[j].Media = &md
			}
			out[i].Parts = parts
		}
		if m.Raw != nil {
			raw := make([]RawJSON, len(m.Raw))
			for j, r := range m.Raw {
				raw[j] = stripRaw(r)
			}
			out[i].Raw = raw
		}
	}
	return out
}

// HoldsMedia reports whether StripMessageMedia would change m: a caller that strips
// in place copies the message only then.
func HoldsMedia(m *Message) bool { return hasMedia(m) }

// StripMessageMedia is StripMedia of one message.
func StripMessageMedia(m Message) Message {
	if !hasMedia(&m) {
		return m
	}
	return StripMedia([]Message{m})[0]
}

// hasMedia reports whether m holds media bytes: a part's data, or what may be bytes
// in a verbatim item.
func hasMedia(m *Message) bool {
	for _, p := range m.Parts {
		if p.Media != nil && p.Media.Data != "" || rawMayHoldMedia(p.Raw) {
			return true
		}
	}
	for _, r := range m.Raw {
		if rawMayHoldMedia(r) {
			return true
		}
	}
	return false
}

func rawMayHoldMedia(r RawJSON) bool {
	return strings.Contains(string(r), ";base64,") || strings.Contains(string(r), `"image_generation_call"`)
}

// dataURLRE is a JSON string that is a base64 data URL: its media type, its bytes.
var dataURLRE = regexp.MustCompile(`"data:([^";,\\]*)(?:;[^";,\\]*)*;base64,([A-Za-z0-9+/=_-]*)"`)

// stripRaw replaces the media bytes of a verbatim item by their hash.
func stripRaw(r RawJSON) RawJSON {
	if !rawMayHoldMedia(r) {
		return r
	}
	s := string(r)
	if strings.Contains(s, ";base64,") {
		s = dataURLRE.ReplaceAllStringFunc(s, func(m string) string {
			sub := dataURLRE.FindStringSubmatch(m)
			return `"data:` + sub[1] + `;sha256,` + hashData(sub[2]) + `"`
		})
	}
	if gjson.Get(s, "type").Str == "image_generation_call" {
		if res := gjson.Get(s, "result"); res.Type == gjson.String && res.Str != "" && !strings.HasPrefix(res.Str, "sha256:") {
			if out, err := sjson.Set(s, "result", "sha256:"+hashData(res.Str)); err == nil {
				s = out
			}
		}
	}
	return RawJSON(s)
}

// hashData is the hex SHA-256 of base64 bytes (padded or not, standard or URL
// alphabet), or of the text itself when it is not base64.
func hashData(data string) string {
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(data); err != nil {
			if raw, err = base64.URLEncoding.DecodeString(data); err != nil {
				raw = []byte(data)
			}
		}
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// AppendString appends s as a JSON string, with <, > and & as they are (as the
// replay buffer writes them).
func AppendString(b []byte, s string) []byte { return appendString(b, s) }

// appendString appends s as a JSON string (AppendEscaped between quotes).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = AppendEscaped(b, s)
	return append(b, '"')
}

// AppendEscaped appends s as the inside of a JSON string, escaped as encoding/json
// does with SetEscapeHTML(false): quote, backslash and control characters escaped,
// U+2028 and U+2029 escaped for JavaScript, invalid UTF-8 replaced by U+FFFD; <, >
// and & as they are (an encoder that escapes HTML escapes them when it copies the
// output).
func AppendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look: most of a message's text is
		// printable ASCII, and the run is copied whole when it ends. A word that holds
		// such a byte is left at it.
		for i+8 <= len(s) {
			m := lookMask(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8)))
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// AppendEscapedHTML is AppendEscaped with <, > and & escaped too (\u003c, \u003e,
// \u0026), as encoding/json escapes them by default. The text between them is
// AppendEscaped's, so that AppendEscaped's loop, which the request path runs, pays
// nothing for this one's.
func AppendEscapedHTML(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for {
		i := indexHTML(s)
		if i < 0 {
			return AppendEscaped(dst, s)
		}
		dst = AppendEscaped(dst, s[:i])
		dst = append(dst, '\\', 'u', '0', '0', hex[s[i]>>4], hex[s[i]&0xf])
		s = s[i+1:]
	}
}

// AppendStringHTML appends s as a JSON string as encoding/json writes it by default
// (AppendEscapedHTML between quotes).
func AppendStringHTML(b []byte, s string) []byte {
	b = append(b, '"')
	b = AppendEscapedHTML(b, s)
	return append(b, '"')
}

// indexHTML is the index of the first <, > or & in s, or -1.
func indexHTML(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := htmlMask(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '<' || c == '>' || c == '&' {
			return i
		}
	}
	return -1
}

// lookMask has the high bit set of each byte of w (eight bytes of text, the first
// in the low bits) that AppendEscaped must look at: a control character, quote,
// backslash or a byte of a multi-byte character. Bits above the lowest may be set
// for bytes that need no look (a borrow carries on), but the lowest set bit is
// exactly the first byte that does.
func lookMask(w uint64) uint64 {
	const (
		lo8 = 0x0101010101010101
		hi8 = 0x8080808080808080
	)
	q, bs := w^(lo8*'"'), w^(lo8*'\\')
	return ((w-lo8*0x20)&^w | (q-lo8)&^q | (bs-lo8)&^bs | w) & hi8
}

// htmlMask is lookMask's for <, > and &: the lowest set bit is exactly the first
// such byte of w (bits above it may be set for other bytes).
func htmlMask(w uint64) uint64 {
	const (
		lo8 = 0x0101010101010101
		hi8 = 0x8080808080808080
	)
	lt, gt, amp := w^(lo8*'<'), w^(lo8*'>'), w^(lo8*'&')
	return ((lt-lo8)&^lt | (gt-lo8)&^gt | (amp-lo8)&^amp) & hi8
}

// Clone returns m with every string copied, so that it no longer aliases the buffer
// it was read from (a stream event, a request body).
func (m Message) Clone() Message {
	m.Role = strings.Clone(m.Role)
	m.Content = strings.Clone(m.Content)
	m.ToolCallID = strings.Clone(m.ToolCallID)
	m.Name = strings.Clone(m.Name)
	if m.ToolCalls != nil {
		calls := make([]ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			calls[i] = ToolCall{ID: strings.Clone(c.ID), Type: strings.Clone(c.Type), Name: strings.Clone(c.Name), Arguments: strings.Clone(c.Arguments)}
		}
		m.ToolCalls = calls
	}
	if m.Parts != nil {
		parts := make([]Part, len(m.Parts))
		for i, p := range m.Parts {
			parts[i] = Part{Type: strings.Clone(p.Type), Text: strings.Clone(p.Text), Raw: RawJSON(strings.Clone(string(p.Raw)))}
			if p.Media != nil {
				md := *p.Media
				md.URL, md.FileID, md.Data = strings.Clone(md.URL), strings.Clone(md.FileID), strings.Clone(md.Data)
				md.SHA256, md.MediaType, md.Filename = strings.Clone(md.SHA256), strings.Clone(md.MediaType), strings.Clone(md.Filename)
				md.Format, md.Detail = strings.Clone(md.Format), strings.Clone(md.Detail)
				parts[i].Media = &md
			}
		}
		m.Parts = parts
	}
	if m.Raw != nil {
		raw := make([]RawJSON, len(m.Raw))
		for i, r := range m.Raw {
			raw[i] = RawJSON(strings.Clone(string(r)))
		}
		m.Raw = raw
	}
	return m
}
