package anthropic

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// TestBlockTypes: every content block type has a place in the chat-shaped messages
// — text, parts, a tool call, a tool message, or verbatim in raw — and none is
// dropped.
func TestBlockTypes(t *testing.T) {
	const (
		serverUse  = `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"fares"}}`
		searchRes  = `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://x","title":"X","encrypted_content":"Eo8"}]}`
		thinking   = `{"type":"thinking","thinking":"Let me think.","signature":"EqQB"}`
		redacted   = `{"type":"redacted_thinking","data":"EmwKAhgB"}`
		container  = `{"type":"container_upload","file_id":"file_1"}`
		futureBlok = `{"type":"hologram","beam":[1]}`
	)
	tests := []struct {
		name string
		msgs string
		want []protocol.Message
	}{
		{"images and documents", `{"role":"user","content":[{"type":"text","text":"compare"},` +
			`{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"aGVsbG8="}},` +
			`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},` +
			`{"type":"image","source":{"type":"file","file_id":"file_img"}},` +
			`{"type":"document","title":"terms.pdf","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}},` +
			`{"type":"document","source":{"type":"url","url":"https://example.com/b.pdf"}},` +
			`{"type":"document","source":{"type":"content","content":[{"type":"text","text":"chunk"}]}}]}`,
			[]protocol.Message{{Role: "user", Content: "compare", Parts: []protocol.Part{
				{Type: "text", Text: "compare"},
				{Type: "image_url", Media: &protocol.Media{MediaType: "image/jpeg", Data: "aGVsbG8="}},
				{Type: "image_url", Media: &protocol.Media{URL: "https://example.com/a.png"}},
				{Type: "image_url", Media: &protocol.Media{FileID: "file_img"}},
				{Type: "file", Media: &protocol.Media{MediaType: "application/pdf", Data: "JVBERi0=", Filename: "terms.pdf"}},
				{Type: "file", Media: &protocol.Media{URL: "https://example.com/b.pdf"}},
				{Type: "document", Raw: `{"type":"document","source":{"type":"content","content":[{"type":"text","text":"chunk"}]}}`},
			}}}},
		{"thinking, server tools and unknown blocks are raw", `{"role":"assistant","content":[` + thinking + `,` + redacted + `,` +
			serverUse + `,` + searchRes + `,{"type":"text","text":"Found."},` + futureBlok + `]}`,
			[]protocol.Message{{Role: "assistant", Content: "Found.", Raw: []protocol.RawJSON{thinking, redacted, serverUse, searchRes, futureBlok}}}},
		{"tool_result with an image", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` +
			`{"type":"text","text":"screenshot:"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGVsbG8="}}]},` +
			container + `]}`,
			[]protocol.Message{
				{Role: "tool", ToolCallID: "toolu_1", Content: "screenshot:", Parts: []protocol.Part{{Type: "text", Text: "screenshot:"},
					{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "aGVsbG8="}}}},
				{Role: "user", Raw: []protocol.RawJSON{container}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(`{"messages":[`+tt.msgs+`]}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Messages, tt.want) {
				got, _ := json.Marshal(r.Messages)
				t.Fatalf("\n got %s\n%#v", got, r.Messages)
			}
			if tt.want[0].Role == "assistant" {
				content := gjson.Get(tt.msgs, "content").Raw
				msg, _, err := DecodeResponse([]byte(`{"type":"message","role":"assistant","content":` + content + `}`))
				if err != nil || !reflect.DeepEqual(msg, tt.want[0]) {
					t.Fatalf("as an answer: %#v %v", msg, err)
				}
			}
		})
	}
}

// TestServerToolStreamMatchesJSON: an answer with a server tool (web search), its
// result and thinking, streamed or not, is one message with the same raw blocks.
func TestServerToolStreamMatchesJSON(t *testing.T) {
	stream := sseEvent("message_start", `{"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Search "}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"first."}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`) +
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\": "}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"fares\"}"}}`) +
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://x","title":"X"}]}}`) +
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":2}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"redacted_thinking","data":"EmwK"}}`) +
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":3}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":4,"content_block":{"type":"text","text":""}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"Fares rose."}}`) +
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":4}`) +
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`) +
		sseEvent("message_stop", `{"type":"message_stop"}`)
	body := `{"type":"message","role":"assistant","content":[
	  {"type": "thinking", "thinking": "Search first.", "signature": "EqQB"},
	  {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "fares"}},
	  {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "https://x", "title": "X"}]},
	  {"type": "redacted_thinking", "data": "EmwK"},
	  {"type": "text", "text": "Fares rose."}],
	 "usage":{"input_tokens":10,"output_tokens":9}}`
	msg, usage, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.Message{Role: "assistant", Content: "Fares rose.", Raw: []protocol.RawJSON{
		`{"type":"thinking","thinking":"Search first.","signature":"EqQB"}`,
		`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"fares"}}`,
		`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://x","title":"X"}]}`,
		`{"type":"redacted_thinking","data":"EmwK"}`,
	}}
	if !reflect.DeepEqual(msg, want) {
		t.Fatalf("JSON answer %#v", msg)
	}
	for _, size := range []int{1, 7, len(stream)} {
		checkDecoded(t, decodeChunks([]byte(stream), func() int { return size }), want, usage, true)
	}
}

// TestClaudeCodeToolTurnStitches: Claude Code's second call (the tool_use answer and
// its tool_result sent back) continues the first call's episode.
func TestClaudeCodeToolTurnStitches(t *testing.T) {
	first, err1 := os.ReadFile("../testdata/harness/claude-code/tool.json")
	second, err2 := os.ReadFile("../testdata/harness/claude-code/tool-2.json")
	if err1 != nil || err2 != nil {
		t.Skipf("captures: %v %v", err1, err2)
	}
	r1, err := Parse(first, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Parse(second, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	// The answer as the API sent it: the assistant message Claude Code sent back.
	var content string
	for _, m := range gjson.GetBytes(second, "messages").Array() {
		if m.Get("role").Str == "assistant" {
			content = m.Get("content").Raw
		}
	}
	ans, _, err := DecodeResponse([]byte(`{"type":"message","role":"assistant","content":` + content + `}`))
	if err != nil || len(ans.ToolCalls) != 1 {
		t.Fatalf("answer %+v %v", ans, err)
	}
	n := len(r1.Messages)
	c1, c2 := episode.Chain(r1.Messages), episode.Chain(r2.Messages)
	if len(c2) <= n || episode.Extend(c1[n-1], &ans) != c2[n] {
		t.Fatalf("the tool turn does not continue the first call:\nanswer %+v\nsecond %+v", ans, r2.Messages)
	}
	if tr := r2.Messages[n+1]; tr.Role != "tool" || tr.ToolCallID != ans.ToolCalls[0].ID || tr.Content == "" {
		t.Errorf("tool result %+v", tr)
	}
}
