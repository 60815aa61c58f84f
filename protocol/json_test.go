package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestMessageJSON(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		want string
	}{
		{"text", Message{Role: "user", Content: "hi <b>"}, `{"role":"user","content":"hi <b>"}`},
		{"empty content stays a string", Message{Role: "assistant"}, `{"role":"assistant","content":""}`},
		{"function call", Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Name: "f", Arguments: `{"a":1}`}}},
			`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`},
		{"untyped call is a function", Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "f"}}},
			`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}`},
		{"custom call", Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "c2", Type: "custom", Name: "apply_patch", Arguments: "*** Begin Patch\n"}}},
			`{"role":"assistant","content":"","tool_calls":[{"id":"c2","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch\n"}}]}`},
		{"tool result", Message{Role: "tool", Content: "ok", ToolCallID: "c1", Name: "f"}, `{"role":"tool","content":"ok","tool_call_id":"c1","name":"f"}`},
		{"raw", Message{Role: "assistant", Content: "x", Raw: []RawJSON{`{"type":"reasoning","encrypted_content":"gAAA"}`, `[1, 2]`}},
			`{"role":"assistant","content":"x","raw":[{"type":"reasoning","encrypted_content":"gAAA"},[1,2]]}`},
		{"parts: image by URL", Message{Role: "user", Content: "what is it", Parts: []Part{
			{Type: "text", Text: "what is it"}, {Type: "image_url", Media: &Media{URL: "https://x/y.png", Detail: "low"}}}},
			`{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]}`},
		{"parts: image kept", Message{Role: "user", Parts: []Part{{Type: "image_url", Media: &Media{MediaType: "image/png", Data: "iVBO"}}}},
			`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}`},
		{"parts: image hashed", Message{Role: "user", Parts: []Part{{Type: "image_url", Media: &Media{MediaType: "image/png", SHA256: "ab"}}}},
			`{"role":"user","content":[{"type":"image_url","image_url":{"sha256":"ab","media_type":"image/png"}}]}`},
		{"parts: audio and file", Message{Role: "user", Parts: []Part{
			{Type: "input_audio", Media: &Media{Data: "UklG", Format: "wav"}},
			{Type: "file", Media: &Media{Filename: "a.pdf", MediaType: "application/pdf", Data: "JVBE"}},
			{Type: "file", Media: &Media{FileID: "file-1"}},
			{Type: "refusal", Text: "no"}}},
			`{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},` +
				`{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBE"}},` +
				`{"type":"file","file":{"file_id":"file-1"}},{"type":"refusal","refusal":"no"}]}`},
		{"parts: unknown kept", Message{Role: "user", Parts: []Part{{Type: "video", Raw: `{"type":"video","x":1}`}}},
			`{"role":"user","content":[{"type":"video","x":1}]}`},
		{"escapes", Message{Role: "user", Content: "a\"\\\n\t\x01\u2028é\xff"}, `{"role":"user","content":"a\"\\\n\t\u0001\u2028é\ufffd"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			// json.Marshal escapes HTML when it copies the output; compare unescaped.
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tt.msg); err != nil {
				t.Fatal(err)
			}
			if s := strings.TrimSuffix(buf.String(), "\n"); s != tt.want {
				t.Errorf("got  %s\nwant %s", s, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON %s", got)
			}
			var back Message
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			want := tt.msg
			if want.Parts != nil {
				want.Content = PartsText(want.Parts)
			}
			for i := range want.ToolCalls {
				if want.ToolCalls[i].Type == "" {
					want.ToolCalls[i].Type = "function"
				}
			}
			if tt.name == "escapes" {
				want.Content = "a\"\\\n\t\x01\u2028é\ufffd"
			}
			if tt.name == "raw" {
				want.Raw = []RawJSON{`{"type":"reasoning","encrypted_content":"gAAA"}`, `[1,2]`} // compacted by the encoder
			}
			if !reflect.DeepEqual(back, want) {
				t.Errorf("round trip\n got  %#v\n want %#v", back, want)
			}
		})
	}
}

// TestMessageReadsV1 reads messages as replay events of schema v1 wrote them before
// tool calls took the OpenAI shape: flat {id, type, name, arguments}.
func TestMessageReadsV1(t *testing.T) {
	old := `{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","name":"cancel","arguments":"{\"id\":\"A\"}"},` +
		`{"id":"call_2","type":"","name":"get","arguments":{"user":"u1"}}]}`
	var m Message
	if err := json.Unmarshal([]byte(old), &m); err != nil {
		t.Fatal(err)
	}
	want := Message{Role: "assistant", ToolCalls: []ToolCall{
		{ID: "call_1", Type: "function", Name: "cancel", Arguments: `{"id":"A"}`},
		{ID: "call_2", Type: "function", Name: "get", Arguments: `{"user":"u1"}`},
	}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
	for _, in := range []string{`{"role":"user","content":null}`, `{"role":"user"}`} {
		var m Message
		if err := json.Unmarshal([]byte(in), &m); err != nil || m.Content != "" || m.Parts != nil {
			t.Errorf("%s: %#v %v", in, m, err)
		}
	}
	// A list of texts is read as the string of its texts.
	var tm Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`), &tm); err != nil {
		t.Fatal(err)
	}
	if tm.Content != "a\nb" || tm.Parts != nil {
		t.Errorf("text parts: %#v", tm)
	}
	if err := json.Unmarshal([]byte(`{"role":"user","content":7}`), &tm); err == nil {
		t.Error("numeric content accepted")
	}
}

func TestStripMedia(t *testing.T) {
	img := Part{Type: "image_url", Media: &Media{MediaType: "image/png", Data: "aGVsbG8="}} // "hello"
	msgs := []Message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: "look", Parts: []Part{{Type: "text", Text: "look"}, img, {Type: "image_url", Media: &Media{URL: "https://x"}}}},
	}
	got := StripMedia(msgs)
	if msgs[1].Parts[1].Media.Data == "" {
		t.Fatal("StripMedia modified its input")
	}
	m := got[1].Parts[1].Media
	// sha256("hello")
	if m.Data != "" || m.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" || m.MediaType != "image/png" {
		t.Errorf("stripped %+v", m)
	}
	if got[1].Parts[2].Media.URL != "https://x" || &got[0] == &msgs[0] {
		t.Errorf("url part %+v", got[1].Parts[2].Media)
	}
	line, _ := json.Marshal(got[1])
	if strings.Contains(string(line), "aGVsbG8") || !strings.Contains(string(line), `"sha256":"2cf24d`) {
		t.Errorf("stripped message %s", line)
	}
	plain := []Message{{Role: "user", Content: "x"}}
	if s := StripMedia(plain); &s[0] != &plain[0] {
		t.Error("messages without media were copied")
	}
	if hashData("not base64!") == hashData("aGVsbG8=") {
		t.Error("hash collision")
	}
}

func TestParseDataURL(t *testing.T) {
	tests := []struct {
		in, mt, data string
		ok           bool
	}{
		{"data:image/png;base64,AAA", "image/png", "AAA", true},
		{"data:application/pdf;name=a.pdf;base64,JV", "application/pdf", "JV", true},
		{"data:text/plain;charset=utf-8,hello%20you", "text/plain", "aGVsbG8geW91", true},
		{"data:,", "", "", true},
		{"https://x/y.png", "", "", false},
		{"data:image/png;base64", "", "", false},
	}
	for _, tt := range tests {
		mt, data, ok := ParseDataURL(tt.in)
		if mt != tt.mt || data != tt.data || ok != tt.ok {
			t.Errorf("%q: %q %q %v", tt.in, mt, data, ok)
		}
	}
}

func FuzzMessageJSON(f *testing.F) {
	f.Add([]byte(`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"custom","custom":{"name":"p","input":"x"}}],"raw":[{"a":1}]}`))
	f.Add([]byte(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}},{"type":"x"}]}`))
	f.Add([]byte(`{"role":"assistant","tool_calls":[{"id":"c","name":"f","arguments":{"a":[1]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if json.Unmarshal(data, &m) != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal %#v: %v", m, err)
		}
		var back Message
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-read %s: %v", out, err)
		}
		again, _ := json.Marshal(back)
		if !bytes.Equal(out, again) {
			t.Fatalf("not stable:\n%s\n%s", out, again)
		}
	})
}

// TestStripMediaInRaw: bytes inside items kept verbatim — a computer call's
// screenshot data URL, an image generation's result — are hashed too, the rest of
// the item left as it was.
func TestStripMediaInRaw(t *testing.T) {
	const sum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	msgs := []Message{{Role: "assistant", Raw: []RawJSON{
		`{"type":"x","shot":{"image_url":"data:image/png;name=a.png;base64,aGVsbG8="},"keep":"data:text/plain,hi"}`,
		`{"type":"image_generation_call","id":"ig_1","status":"completed","result":"aGVsbG8="}`,
		`{"type":"reasoning","summary":[]}`,
	}, Parts: []Part{{Type: "input_video", Raw: `{"type":"input_video","video_url":"data:video/mp4;base64,aGVsbG8="}`}}}}
	got := StripMedia(msgs)
	want := []RawJSON{
		`{"type":"x","shot":{"image_url":"data:image/png;sha256,` + sum + `"},"keep":"data:text/plain,hi"}`,
		`{"type":"image_generation_call","id":"ig_1","status":"completed","result":"sha256:` + sum + `"}`,
		`{"type":"reasoning","summary":[]}`,
	}
	if !reflect.DeepEqual(got[0].Raw, want) {
		t.Errorf("raw\n got %q\nwant %q", got[0].Raw, want)
	}
	if p := got[0].Parts[0].Raw; p != `{"type":"input_video","video_url":"data:video/mp4;sha256,`+sum+`"}` {
		t.Errorf("part %s", p)
	}
	if !strings.Contains(string(msgs[0].Raw[0]), "aGVsbG8=") {
		t.Error("StripMedia modified its input")
	}
}
