// Package lake moves episodes between a replay buffer and the tools of a data lake:
// export (one row per episode, as JSON Lines, one Parquet file, or Hive-partitioned
// Parquet in a directory or an S3 prefix, with a manifest) and import (tau-bench
// results, replay events or export rows as JSON Lines, Parquet files and partitioned
// exports, detected by their first bytes), including the import run the CLI drives:
// an Input opened from a file or directory, written into a sink in batches. It is
// apart from package replay so that the recorder, and the data plane that feeds it,
// link no Parquet.
package lake

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// Row is one episode flattened for training and analysis tools: the whole
// trajectory, the context it ran with and its verdict. Reward and Success are nil for
// an episode that never got feedback, which is not the same as a failure.
type Row struct {
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	Task      string `json:"task"`
	// Experiment is the experiment the episode ran in (replay.ExperimentOf): two
	// experiments may name their arms alike, so an arm alone does not say which.
	Experiment string             `json:"experiment"`
	Arm        string             `json:"arm"`
	Context    string             `json:"context"`
	Messages   []protocol.Message `json:"messages"`
	Turns      int                `json:"turns"`
	Reward     *float64           `json:"reward"`
	Success    *bool              `json:"success"`
	StartedAt  time.Time          `json:"started_at"`
}

// Rows flattens the buffer's episodes, in Buffer order.
func Rows(b *replay.Buffer) []Row {
	rows := make([]Row, 0, len(b.Episodes))
	for _, e := range b.Episodes {
		rows = append(rows, rowOf(e))
	}
	return rows
}

// rowOf flattens one episode.
func rowOf(e *replay.Episode) Row {
	return Row{
		EpisodeID: e.ID, TaskID: e.TaskID, Task: e.Task, Experiment: replay.ExperimentOf(e), Arm: e.Arm, Context: e.Context,
		Messages: nonNil(e.Messages), Turns: e.Steps, Reward: e.Reward, Success: e.Success,
		StartedAt: e.StartedAt.UTC(),
	}
}

// ExportJSONL writes one Row a line: the shape most fine-tuning tools load directly.
func ExportJSONL(w io.Writer, b *replay.Buffer) error {
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
	EpisodeID string `parquet:"episode_id"`
	TaskID    string `parquet:"task_id"`
	Task      string `parquet:"task"`
	// Experiment is absent from files written before it was exported: read as "".
	Experiment string           `parquet:"experiment"`
	Arm        string           `parquet:"arm"`
	Context    string           `parquet:"context"`
	Messages   []parquetMessage `parquet:"messages,list"`
	Turns      int64            `parquet:"turns"`
	Reward     *float64         `parquet:"reward,optional"`
	Success    *bool            `parquet:"success,optional"`
	StartedAt  time.Time        `parquet:"started_at,timestamp(millisecond)"`
}

// parquetMessage is protocol.Message in the OpenAI chat shape. Parquet has no
// string-or-list column, so content is the message's text and content_parts its parts
// (empty unless it has a part other than text); raw holds each verbatim item as JSON
// text, since items of different kinds share no schema.
type parquetMessage struct {
	Role         string            `parquet:"role"`
	Content      string            `parquet:"content"`
	ContentParts []parquetPart     `parquet:"content_parts,list"`
	ToolCalls    []parquetToolCall `parquet:"tool_calls,list"`
	ToolCallID   string            `parquet:"tool_call_id"`
	Name         string            `parquet:"name"`
	Raw          []string          `parquet:"raw,list"`
}

// parquetToolCall is {id, type, function: {name, arguments}} or, for a custom call,
// {id, type, custom: {name, input}}; the other group is null.
type parquetToolCall struct {
	ID       string           `parquet:"id"`
	Type     string           `parquet:"type"`
	Function *parquetFunction `parquet:"function,optional"`
	Custom   *parquetCustom   `parquet:"custom,optional"`
}

type parquetFunction struct {
	Name      string `parquet:"name"`
	Arguments string `parquet:"arguments"`
}

type parquetCustom struct {
	Name  string `parquet:"name"`
	Input string `parquet:"input"`
}

// parquetPart is an OpenAI content part: text or refusal in text, media in the group
// named by its type; a part of another type as its JSON text in raw.
type parquetPart struct {
	Type       string        `parquet:"type"`
	Text       *string       `parquet:"text,optional"`
	ImageURL   *parquetMedia `parquet:"image_url,optional"`
	InputAudio *parquetMedia `parquet:"input_audio,optional"`
	File       *parquetMedia `parquet:"file,optional"`
	Raw        *string       `parquet:"raw,optional"`
}

// parquetMedia is one schema for the three media groups: the union of their keys.
type parquetMedia struct {
	URL       *string `parquet:"url,optional"`
	Detail    *string `parquet:"detail,optional"`
	FileID    *string `parquet:"file_id,optional"`
	Filename  *string `parquet:"filename,optional"`
	Format    *string `parquet:"format,optional"`
	Data      *string `parquet:"data,optional"` // base64 bytes, when the buffer kept them
	SHA256    *string `parquet:"sha256,optional"`
	MediaType *string `parquet:"media_type,optional"`
}

// ExportParquet writes the rows as one Parquet file, zstd-compressed: long
// conversations repeat the same system prompt and tool schemas, which compress well.
func ExportParquet(w io.Writer, b *replay.Buffer) error {
	rows := Rows(b)
	out := make([]parquetRow, len(rows))
	for i, r := range rows {
		out[i] = toParquet(r)
	}
	if err := parquet.Write(w, out, parquet.Compression(newExportZstd())); err != nil {
		return fmt.Errorf("export parquet: %w", err)
	}
	return nil
}

func toParquet(r Row) parquetRow {
	msgs := make([]parquetMessage, len(r.Messages))
	for i, m := range r.Messages {
		pm := parquetMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			pt := parquetToolCall{ID: tc.ID, Type: tc.Type}
			switch tc.Type {
			case protocol.ToolCustom:
				pt.Custom = &parquetCustom{Name: tc.Name, Input: tc.Arguments}
			case "":
				pt.Type = protocol.ToolFunction
				fallthrough
			default:
				pt.Function = &parquetFunction{Name: tc.Name, Arguments: tc.Arguments}
			}
			pm.ToolCalls = append(pm.ToolCalls, pt)
		}
		for _, p := range m.Parts {
			pm.ContentParts = append(pm.ContentParts, toParquetPart(p))
		}
		for _, raw := range m.Raw {
			pm.Raw = append(pm.Raw, string(raw))
		}
		msgs[i] = pm
	}
	return parquetRow{
		EpisodeID: r.EpisodeID, TaskID: r.TaskID, Task: r.Task, Experiment: r.Experiment, Arm: r.Arm, Context: r.Context,
		Messages: msgs, Turns: int64(r.Turns), Reward: r.Reward, Success: r.Success, StartedAt: r.StartedAt,
	}
}

func toParquetPart(p protocol.Part) parquetPart {
	out := parquetPart{Type: p.Type}
	switch p.Type {
	case protocol.PartText, protocol.PartRefusal:
		out.Text = &p.Text
		return out
	case protocol.PartImage, protocol.PartInputAudio, protocol.PartFile:
	default:
		raw, _ := json.Marshal(p)
		s := string(raw)
		out.Raw = &s
		return out
	}
	m := protocol.Media{}
	if p.Media != nil {
		m = *p.Media
	}
	pm := &parquetMedia{URL: opt(m.URL), Detail: opt(m.Detail), FileID: opt(m.FileID), Filename: opt(m.Filename),
		Format: opt(m.Format), Data: opt(m.Data), SHA256: opt(m.SHA256), MediaType: opt(m.MediaType)}
	switch p.Type {
	case protocol.PartImage:
		out.ImageURL = pm
	case protocol.PartInputAudio:
		out.InputAudio = pm
	default:
		out.File = pm
	}
	return out
}

// opt is nil for "", so that an absent key reads back as null.
func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
