package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/protocol"
)

func ptr[T any](v T) *T { return &v }

// exportBuffer holds a rewarded episode with tool calls and an unrewarded one.
func exportBuffer() *Buffer {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	return &Buffer{Episodes: []*Episode{
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
		for _, k := range []string{"episode_id", "task_id", "task", "arm", "context", "messages", "turns", "reward", "success", "started_at"} {
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
		Role      string `parquet:"role"`
		Content   string `parquet:"content"`
		ToolCalls []struct {
			ID        string `parquet:"id"`
			Type      string `parquet:"type"`
			Name      string `parquet:"name"`
			Arguments string `parquet:"arguments"`
		} `parquet:"tool_calls,list"`
		ToolCallID string `parquet:"tool_call_id"`
		Name       string `parquet:"name"`
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
	if len(r.Messages) != 4 || len(r.Messages[1].ToolCalls) != 2 || r.Messages[1].ToolCalls[1].Arguments != `{"user_id":"u1"}` ||
		r.Messages[1].ToolCalls[0].Name != "cancel_reservation" || r.Messages[2].ToolCallID != "call_1" || r.Messages[3].Content != "Done <b>&</b>." {
		t.Errorf("messages %+v", r.Messages)
	}
	if rows[1].EpisodeID != "ep-2" || rows[1].Reward != nil || rows[1].Success != nil || len(rows[1].Messages) != 0 {
		t.Errorf("unrewarded row %+v", rows[1])
	}
}

// checkParquetSchema checks the column layout other tools rely on.
func checkParquetSchema(t *testing.T, s *parquet.Schema) {
	t.Helper()
	want := map[string]bool{
		"episode_id": false, "task_id": false, "task": false, "arm": false, "context": false,
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
		"group messages (LIST)", "group tool_calls (LIST)", "binary arguments (STRING)",
		"optional double reward", "optional boolean success", "int64 turns",
		"started_at (TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS))",
	} {
		if !strings.Contains(text, frag) {
			t.Errorf("schema lacks %q:\n%s", frag, text)
		}
	}
}
