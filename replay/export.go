package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/protocol"
)

// Row is one episode flattened for training and analysis tools: the whole
// trajectory, the context it ran with and its verdict. Reward and Success are nil for
// an episode that never got feedback, which is not the same as a failure.
type Row struct {
	EpisodeID string             `json:"episode_id"`
	TaskID    string             `json:"task_id"`
	Task      string             `json:"task"`
	Arm       string             `json:"arm"`
	Context   string             `json:"context"`
	Messages  []protocol.Message `json:"messages"`
	Turns     int                `json:"turns"`
	Reward    *float64           `json:"reward"`
	Success   *bool              `json:"success"`
	StartedAt time.Time          `json:"started_at"`
}

// Rows flattens the buffer's episodes, in Buffer order.
func Rows(b *Buffer) []Row {
	rows := make([]Row, 0, len(b.Episodes))
	for _, e := range b.Episodes {
		rows = append(rows, Row{
			EpisodeID: e.ID, TaskID: e.TaskID, Task: e.Task, Arm: e.Arm, Context: e.Context,
			Messages: nonNil(e.Messages), Turns: e.Steps, Reward: e.Reward, Success: e.Success,
			StartedAt: e.StartedAt.UTC(),
		})
	}
	return rows
}

// ExportJSONL writes one Row a line: the shape most fine-tuning tools load directly.
func ExportJSONL(w io.Writer, b *Buffer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // code and HTML in conversations stay readable
	for _, r := range Rows(b) {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("export %s: %w", r.EpisodeID, err)
		}
	}
	return nil
}

// parquetRow is Row with the Parquet schema spelled out: nested messages as a LIST
// of STRUCT (so pandas/Arrow see list<struct>), optional reward and success so that
// "no feedback" stays null, and a millisecond UTC timestamp.
type parquetRow struct {
	EpisodeID string           `parquet:"episode_id"`
	TaskID    string           `parquet:"task_id"`
	Task      string           `parquet:"task"`
	Arm       string           `parquet:"arm"`
	Context   string           `parquet:"context"`
	Messages  []parquetMessage `parquet:"messages,list"`
	Turns     int64            `parquet:"turns"`
	Reward    *float64         `parquet:"reward,optional"`
	Success   *bool            `parquet:"success,optional"`
	StartedAt time.Time        `parquet:"started_at,timestamp(millisecond)"`
}

type parquetMessage struct {
	Role       string            `parquet:"role"`
	Content    string            `parquet:"content"`
	ToolCalls  []parquetToolCall `parquet:"tool_calls,list"`
	ToolCallID string            `parquet:"tool_call_id"`
	Name       string            `parquet:"name"`
}

type parquetToolCall struct {
	ID        string `parquet:"id"`
	Type      string `parquet:"type"`
	Name      string `parquet:"name"`
	Arguments string `parquet:"arguments"`
}

// ExportParquet writes the rows as one Parquet file, zstd-compressed: long
// conversations repeat the same system prompt and tool schemas, which compress well.
func ExportParquet(w io.Writer, b *Buffer) error {
	rows := Rows(b)
	out := make([]parquetRow, len(rows))
	for i, r := range rows {
		out[i] = toParquet(r)
	}
	if err := parquet.Write(w, out, parquet.Compression(&parquet.Zstd)); err != nil {
		return fmt.Errorf("export parquet: %w", err)
	}
	return nil
}

func toParquet(r Row) parquetRow {
	msgs := make([]parquetMessage, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = parquetMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, parquetToolCall(tc))
		}
	}
	return parquetRow{
		EpisodeID: r.EpisodeID, TaskID: r.TaskID, Task: r.Task, Arm: r.Arm, Context: r.Context,
		Messages: msgs, Turns: int64(r.Turns), Reward: r.Reward, Success: r.Success, StartedAt: r.StartedAt,
	}
}
