package lake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

func ptr[T any](v T) *T { return &v }

// exportBuffer holds a rewarded episode with tool calls and an unrewarded one.
func exportBuffer() *replay.Buffer {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	return &replay.Buffer{Episodes: []*replay.Episode{
		{
			ID: "ep-1", TaskID: "t1", Task: "Cancel ABC123.", Arm: "cam", Context: "Check the fare rules first.",
			StartedAt: t0, Steps: 2, Reward: ptr(1.0), Success: ptr(true),
			Messages: []protocol.Message{
				{Role: "user", Content: "Cancel ABC123."},
				{Role: "assistant", ToolCalls: []protocol.ToolCall{
					{ID: "call_1", Type: "function", Name: "cancel_reservation", Arguments: `{"reservation_id":"ABC123"}`},
					{ID: "call_2", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"u1"}`},
				}},
				{Role: "tool", Content: "ok", ToolCallID: "call_1", Name: "cancel_reservation"},
				{Role: "assistant", Content: "Done <b>&</b>."},
				{Role: "user", Content: "and this?", Parts: []protocol.Part{
					{Type: "text", Text: "and this?"},
					{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", SHA256: "2cf24dba"}},
					{Type: "image_url", Media: &protocol.Media{URL: "https://example.com/a.png", Detail: "low"}},
				}},
				{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_3", Type: "custom", Name: "apply_patch", Arguments: "*** Begin Patch\n*** End Patch"}},
					Raw: []protocol.RawJSON{`{"type":"reasoning","id":"rs_1","summary":[]}`}},
			},
		},
		{ID: "ep-2", TaskID: "t1", Task: "Cancel ABC123.", Arm: "baseline", StartedAt: t0.Add(time.Minute)},
	}}
}

func TestRows(t *testing.T) {
	rows := Rows(exportBuffer())
	if len(rows) != 2 || rows[0].EpisodeID != "ep-1" || rows[1].EpisodeID != "ep-2" {
		t.Fatalf("rows %+v", rows)
	}
	if rows[0].Turns != 2 || rows[0].StartedAt.Location() != time.UTC || *rows[0].Reward != 1 {
		t.Errorf("row 0 %+v", rows[0])
	}
	if rows[1].Messages == nil || rows[1].Reward != nil || rows[1].Success != nil {
		t.Errorf("row 1 %+v", rows[1])
	}
}

func TestExportJSONLRoundTrip(t *testing.T) {
	b := exportBuffer()
	var buf bytes.Buffer
	if err := ExportJSONL(&buf, b); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if !strings.Contains(text, "Done <b>&</b>.") {
		t.Error("HTML in content was escaped")
	}
	if !strings.Contains(text, `"reward":null,"success":null`) {
		t.Error("unrewarded episode does not export reward and success as null")
	}
	sc := bufio.NewScanner(&buf)
	var got []Row
	for sc.Scan() {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"episode_id", "task_id", "task", "experiment", "arm", "context", "messages", "turns", "reward", "success", "started_at"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("line lacks %q: %s", k, sc.Bytes())
			}
		}
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := Rows(b)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

// readBackRow is an independent description of the exported file, so the test
// checks the file, not the writer's own struct.
type readBackRow struct {
	EpisodeID string `parquet:"episode_id"`
	TaskID    string `parquet:"task_id"`
	Task      string `parquet:"task"`
	Arm       string `parquet:"arm"`
	Context   string `parquet:"context"`
	Messages  []struct {
		Role         string `parquet:"role"`
		Content      string `parquet:"content"`
		ContentParts []struct {
			Type     string  `parquet:"type"`
			Text     *string `parquet:"text,optional"`
			ImageURL *struct {
				URL       *string `parquet:"url,optional"`
				Detail    *string `parquet:"detail,optional"`
				SHA256    *string `parquet:"sha256,optional"`
				MediaType *string `parquet:"media_type,optional"`
			} `parquet:"image_url,optional"`
		} `parquet:"content_parts,list"`
		ToolCalls []struct {
			ID       string `parquet:"id"`
			Type     string `parquet:"type"`
			Function *struct {
				Name      string `parquet:"name"`
				Arguments string `parquet:"arguments"`
			} `parquet:"function,optional"`
			Custom *struct {
				Name  string `parquet:"name"`
				Input string `parquet:"input"`
			} `parquet:"custom,optional"`
		} `parquet:"tool_calls,list"`
		ToolCallID string   `parquet:"tool_call_id"`
		Name       string   `parquet:"name"`
		Raw        []string `parquet:"raw,list"`
	} `parquet:"messages,list"`
	Turns     int64     `parquet:"turns"`
	Reward    *float64  `parquet:"reward,optional"`
	Success   *bool     `parquet:"success,optional"`
	StartedAt time.Time `parquet:"started_at,timestamp(millisecond)"`
}

func TestExportParquet(t *testing.T) {
	var buf bytes.Buffer
	if err := ExportParquet(&buf, exportBuffer()); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if f.NumRows() != 2 {
		t.Fatalf("%d rows, want 2", f.NumRows())
	}
	checkParquetSchema(t, f.Schema())

	rows, err := parquet.Read[readBackRow](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.EpisodeID != "ep-1" || r.Arm != "cam" || r.Context != "Check the fare rules first." || r.Turns != 2 ||
		r.Reward == nil || *r.Reward != 1 || r.Success == nil || !*r.Success {
		t.Errorf("row 0 %+v", r)
	}
	if !r.StartedAt.Equal(time.Date(2024, 5, 1, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("started_at %v", r.StartedAt)
	}
	if len(r.Messages) != 6 || len(r.Messages[1].ToolCalls) != 2 || r.Messages[1].ToolCalls[1].Function == nil ||
		r.Messages[1].ToolCalls[1].Function.Arguments != `{"user_id":"u1"}` || r.Messages[1].ToolCalls[0].Custom != nil ||
		r.Messages[1].ToolCalls[0].Function.Name != "cancel_reservation" || r.Messages[2].ToolCallID != "call_1" || r.Messages[3].Content != "Done <b>&</b>." {
		t.Fatalf("messages %+v", r.Messages)
	}
	if parts := r.Messages[4].ContentParts; len(parts) != 3 || *parts[0].Text != "and this?" || parts[1].ImageURL == nil ||
		*parts[1].ImageURL.SHA256 != "2cf24dba" || *parts[1].ImageURL.MediaType != "image/png" || parts[1].ImageURL.URL != nil ||
		*parts[2].ImageURL.URL != "https://example.com/a.png" || *parts[2].ImageURL.Detail != "low" {
		t.Errorf("content parts %+v", parts)
	}
	if len(r.Messages[3].ContentParts) != 0 {
		t.Errorf("a text message has parts: %+v", r.Messages[3].ContentParts)
	}
	if c := r.Messages[5].ToolCalls; len(c) != 1 || c[0].Type != "custom" || c[0].Function != nil || c[0].Custom == nil ||
		c[0].Custom.Name != "apply_patch" || c[0].Custom.Input != "*** Begin Patch\n*** End Patch" {
		t.Errorf("custom call %+v", c)
	}
	if raw := r.Messages[5].Raw; len(raw) != 1 || raw[0] != `{"type":"reasoning","id":"rs_1","summary":[]}` {
		t.Errorf("raw %q", raw)
	}
	if rows[1].EpisodeID != "ep-2" || rows[1].Reward != nil || rows[1].Success != nil || len(rows[1].Messages) != 0 {
		t.Errorf("unrewarded row %+v", rows[1])
	}
}

// checkParquetSchema checks the column layout other tools rely on.
func checkParquetSchema(t *testing.T, s *parquet.Schema) {
	t.Helper()
	want := map[string]bool{
		"episode_id": false, "task_id": false, "task": false, "experiment": false, "arm": false, "context": false,
		"messages": false, "turns": false, "reward": true, "success": true, "started_at": false,
	}
	fields := s.Fields()
	if len(fields) != len(want) {
		t.Errorf("%d columns, want %d:\n%s", len(fields), len(want), s)
	}
	for _, f := range fields {
		optional, ok := want[f.Name()]
		if !ok || f.Optional() != optional {
			t.Errorf("column %s optional=%v unexpected", f.Name(), f.Optional())
		}
	}
	text := s.String()
	for _, frag := range []string{
		"group messages (LIST)", "group tool_calls (LIST)", "optional group function", "binary arguments (STRING)",
		"optional group custom", "binary input (STRING)", "group content_parts (LIST)", "optional group image_url",
		"optional binary sha256 (STRING)", "group raw (LIST)",
		"optional double reward", "optional boolean success", "int64 turns",
		"started_at (TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS))",
	} {
		if !strings.Contains(text, frag) {
			t.Errorf("schema lacks %q:\n%s", frag, text)
		}
	}
}

// TestExportJSONLOpenAIShape checks the messages of an exported line against the
// OpenAI chat shape, key by key: tool calls with their function (or custom) object,
// content parts with media by URL or hash, raw items kept.
func TestExportJSONLOpenAIShape(t *testing.T) {
	var buf bytes.Buffer
	if err := ExportJSONL(&buf, exportBuffer()); err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(buf.String(), "\n")
	var row struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal([]byte(line), &row); err != nil {
		t.Fatal(err)
	}
	msgs := row.Messages
	if len(msgs) != 6 {
		t.Fatalf("%d messages", len(msgs))
	}
	call := msgs[1]["tool_calls"].([]any)[0].(map[string]any)
	want := map[string]any{"id": "call_1", "type": "function",
		"function": map[string]any{"name": "cancel_reservation", "arguments": `{"reservation_id":"ABC123"}`}}
	if !reflect.DeepEqual(call, want) {
		t.Errorf("tool call %v, want %v", call, want)
	}
	custom := msgs[5]["tool_calls"].([]any)[0].(map[string]any)
	want = map[string]any{"id": "call_3", "type": "custom", "custom": map[string]any{"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}}
	if !reflect.DeepEqual(custom, want) {
		t.Errorf("custom call %v, want %v", custom, want)
	}
	if _, ok := msgs[5]["raw"].([]any)[0].(map[string]any)["summary"]; !ok {
		t.Errorf("raw %v", msgs[5]["raw"])
	}
	parts, ok := msgs[4]["content"].([]any)
	if !ok || len(parts) != 3 {
		t.Fatalf("content %v", msgs[4]["content"])
	}
	wantParts := []any{
		map[string]any{"type": "text", "text": "and this?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"sha256": "2cf24dba", "media_type": "image/png"}},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/a.png", "detail": "low"}},
	}
	if !reflect.DeepEqual(parts, wantParts) {
		t.Errorf("parts %v\nwant %v", parts, wantParts)
	}
	if c, ok := msgs[3]["content"].(string); !ok || c != "Done <b>&</b>." {
		t.Errorf("text content %v", msgs[3]["content"])
	}
}

// TestReadV1FlatToolCalls reads events written before tool calls took the OpenAI
// shape ({id, type, name, arguments}) and exports them in the OpenAI shape.
func TestReadV1FlatToolCalls(t *testing.T) {
	dir := t.TempDir()
	old, err := os.ReadFile("testdata/v1_flat_tool_calls.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00000001.jsonl"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := replay.Read(context.Background(), replay.NewFileSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Episodes) != 1 || b.Skipped != 0 {
		t.Fatalf("%d episodes, %d skipped", len(b.Episodes), b.Skipped)
	}
	ep := b.Episodes[0]
	want := []protocol.Message{
		{Role: "system", Content: "You are an airline agent."},
		{Role: "user", Content: "Cancel ABC123."},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_1", Type: "function", Name: "cancel_reservation", Arguments: `{"reservation_id":"ABC123"}`}}},
		{Role: "tool", Content: `{"status":"cancelled"}`, ToolCallID: "call_1"},
		{Role: "assistant", Content: "Done."},
	}
	if !reflect.DeepEqual(ep.Messages, want) {
		t.Fatalf("messages\n got %#v\nwant %#v", ep.Messages, want)
	}
	var out bytes.Buffer
	if err := ExportJSONL(&out, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"cancel_reservation","arguments":"{\"reservation_id\":\"ABC123\"}"}}]`) {
		t.Errorf("export is not in the OpenAI shape:\n%s", out.String())
	}
}
