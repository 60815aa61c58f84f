package lake

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// ImportOptions tunes ImportTauBench.
type ImportOptions struct {
	// Arm is recorded on every imported episode, so imported runs never mix with the
	// arms of a live experiment. Default "imported".
	Arm string
	// Domain names the tau-bench domain (airline, retail…) in episode and task ids, so
	// that imports of several domains do not collide. Default: DomainFromPath of the
	// file name if the caller knows it, else "tau".
	Domain string
}

// maxLineBytes bounds one JSON Lines event; a single step of a long conversation can
// hold several hundred KB, so bufio.Scanner's 64 KB default is far too small.
const maxLineBytes = 64 << 20

// DomainFromPath guesses the tau-bench domain from a trajectory file name, which
// tau-bench spells <model>-<domain>.json (gpt-4o-airline.json → "airline").
func DomainFromPath(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[i+1:]
	}
	if base == "" || base == "." {
		return "tau"
	}
	return base
}

// tauRun is one element of a tau-bench historical_trajectories array. Ids are kept
// raw because tau-bench numbers them but other exports quote them.
type tauRun struct {
	TaskID json.RawMessage `json:"task_id"`
	Trial  json.RawMessage `json:"trial"`
	Reward float64         `json:"reward"`
	Info   struct {
		Task struct {
			Instruction string `json:"instruction"`
		} `json:"task"`
	} `json:"info"`
	Traj []tauMessage `json:"traj"`
}

// tauMessage is an OpenAI chat message as tau-bench (litellm) dumps it: content may
// be null (tool-calling turns) or a list of parts.
type tauMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []tauToolCall   `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

type tauToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ImportTauBench reads a tau-bench historical_trajectories JSON array and emits the
// encoded events of each run: an episode event, one step per assistant message (plus
// a last step for messages after the final answer), and a reward event. The array is
// streamed, so memory holds one run at a time. Event ids and times are derived from
// the run, so importing the same file twice yields the same events and readers drop
// the second copy.
func ImportTauBench(r io.Reader, o ImportOptions, emit func(line []byte) error) (episodes int, err error) {
	if o.Arm == "" {
		o.Arm = "imported"
	}
	if o.Domain == "" {
		o.Domain = "tau"
	}
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '['); err != nil {
		return 0, fmt.Errorf("tau-bench: want a JSON array of runs: %w", err)
	}
	for dec.More() {
		var run tauRun
		if err := dec.Decode(&run); err != nil {
			return episodes, fmt.Errorf("tau-bench run %d: %w", episodes, err)
		}
		if err := emitTauRun(&run, episodes, o, emit); err != nil {
			return episodes, err
		}
		episodes++
	}
	if err := expectDelim(dec, ']'); err != nil {
		return episodes, fmt.Errorf("tau-bench: after run %d: %w", episodes, err)
	}
	return episodes, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v where %q was expected", tok, want)
	}
	return nil
}

// emitTauRun converts one run into its events and emits them in order.
func emitTauRun(run *tauRun, index int, o ImportOptions, emit func([]byte) error) error {
	events, err := tauEvents(run, index, o)
	if err != nil {
		return fmt.Errorf("tau-bench run %d: %w", index, err)
	}
	for _, ev := range events {
		line, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("tau-bench run %d: encode: %w", index, err)
		}
		if err := emit(line); err != nil {
			return err
		}
	}
	return nil
}

// tauEvents builds the episode, step and reward events of one run.
func tauEvents(run *tauRun, index int, o ImportOptions) ([]any, error) {
	taskID, trial := rawID(run.TaskID), rawID(run.Trial)
	if taskID == "" {
		return nil, errors.New("no task_id")
	}
	if trial == "" {
		trial = strconv.Itoa(index)
	}
	msgs, err := normaliseTau(run.Traj)
	if err != nil {
		return nil, err
	}
	episodeID := "tau-" + o.Domain + "-" + taskID + "-" + trial
	started := replay.ImportEpoch().Add(time.Duration(index) * time.Second)
	events := []any{&replay.EpisodeEvent{
		V: replay.Version, Type: replay.TypeEpisode, ID: importEventID(episodeID, replay.TypeEpisode, 0),
		EpisodeID: episodeID, TaskID: "tau-" + o.Domain + "-" + taskID, Task: run.Info.Task.Instruction,
		Arm: o.Arm, ContextSource: "none", Protocol: "openai", StartedAt: started,
	}}
	steps := splitSteps(msgs)
	for turn, s := range steps {
		s.V, s.Type, s.EpisodeID, s.Turn, s.Status = replay.Version, replay.TypeStep, episodeID, turn, 200
		s.ID = importEventID(episodeID, replay.TypeStep, turn)
		s.At = started.Add(time.Duration(turn+1) * time.Millisecond)
		events = append(events, s)
	}
	events = append(events, tauReward(run, episodeID, o.Domain, taskID, trial, started.Add(time.Duration(len(steps)+1)*time.Millisecond)))
	return events, nil
}

// tauReward records the run's verdict; tau-bench counts a run as solved only at
// reward 1, and the metadata says where the episode came from.
func tauReward(run *tauRun, episodeID, domain, taskID, trial string, at time.Time) *replay.RewardEvent {
	success := run.Reward >= 1
	meta, _ := json.Marshal(map[string]string{"source": "tau-bench", "domain": domain, "task_id": taskID, "trial": trial})
	return &replay.RewardEvent{
		V: replay.Version, Type: replay.TypeReward, ID: importEventID(episodeID, replay.TypeReward, 0),
		EpisodeID: episodeID, Reward: run.Reward, Success: &success, Metadata: meta, At: at,
	}
}

// splitSteps cuts a trajectory into calls the way the proxy would have recorded
// them: each call sends the messages new since the previous answer and gets one
// assistant answer. Messages after the last answer (the user's goodbye, a tool result)
// become a final step without an answer, so the reassembled trajectory is complete.
func splitSteps(msgs []protocol.Message) []*replay.StepEvent {
	var steps []*replay.StepEvent
	start := 0
	for i := range msgs {
		if msgs[i].Role != "assistant" {
			continue
		}
		resp := msgs[i]
		steps = append(steps, &replay.StepEvent{Messages: nonNil(msgs[start:i]), Response: &resp})
		start = i + 1
	}
	if start < len(msgs) {
		steps = append(steps, &replay.StepEvent{Messages: msgs[start:]})
	}
	return steps
}

// nonNil keeps an empty step's messages encoded as [] rather than null.
func nonNil(m []protocol.Message) []protocol.Message {
	if m == nil {
		return []protocol.Message{}
	}
	return m
}

// normaliseTau converts tau-bench messages to the normalised chat shape.
func normaliseTau(traj []tauMessage) ([]protocol.Message, error) {
	out := make([]protocol.Message, 0, len(traj))
	for i, m := range traj {
		content, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		pm := protocol.Message{Role: m.Role, Content: content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			pm.ToolCalls = append(pm.ToolCalls, protocol.ToolCall{
				ID: tc.ID, Type: orDefault(tc.Type, "function"), Name: tc.Function.Name, Arguments: argumentsText(tc.Function.Arguments),
			})
		}
		out = append(out, pm)
	}
	return out, nil
}

// contentText flattens OpenAI content: null → "", a string as is, a list of parts →
// its text parts joined, as the proxy's own normalisation does.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// argumentsText keeps OpenAI's JSON-encoded string as is; a few exporters write the
// arguments as an object, which is kept as its JSON text.
func argumentsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}

// rawID renders a number or string id as text.
func rawID(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if bytes.Equal(raw, []byte("null")) {
		return ""
	}
	return string(bytes.TrimSpace(raw))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// importEventID derives an event id from what the event is, so re-imports produce
// the same ids and readers deduplicate them. It has NewEventID's length.
func importEventID(episodeID, typ string, turn int) string {
	h := sha256.Sum256([]byte(episodeID + "\x00" + typ + "\x00" + strconv.Itoa(turn)))
	return hex.EncodeToString(h[:10])
}

// ImportJSONL copies camproxy replay events, one JSON object a line, checking each
// with Decode so that a sink never receives a line a reader would reject. A line that
// is a `replay export` row (an object with episode_id and messages but no type) is
// turned back into its events (see RowEvents), so an export can come back. Blank
// lines are skipped; the first bad line stops the import with an error naming its number.
// A line without an event id gets one derived from its bytes, so that readers can
// still drop the copies a repeated import makes. Each emitted line is a fresh copy
// that emit may keep.
func ImportJSONL(r io.Reader, emit func(line []byte) error) (events int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if isExportRow(line) {
			k, err := importRowLine(line, emit)
			events += k
			if err != nil {
				return events, fmt.Errorf("line %d: %w", n, err)
			}
			continue
		}
		if r := gjson.GetManyBytes(line, "v", "type"); !r[0].Exists() && !r[1].Exists() {
			return events, fmt.Errorf("line %d: %w: neither a replay event (it has no \"v\" and \"type\") nor a replay export row (episode_id and a messages list)", n, replay.ErrUnknownEvent)
		}
		line, err := checkedLine(line)
		if err != nil {
			return events, fmt.Errorf("line %d: %w", n, err)
		}
		if err := emit(line); err != nil {
			return events, err
		}
		events++
	}
	if err := sc.Err(); err != nil {
		return events, fmt.Errorf("line %d: %w", n+1, err)
	}
	return events, nil
}

// checkedLine validates one event and returns a copy of it that carries an id.
func checkedLine(line []byte) ([]byte, error) {
	if _, err := replay.Decode(line); err != nil {
		return nil, err
	}
	if gjson.GetBytes(line, "id").String() != "" {
		return bytes.Clone(line), nil
	}
	h := sha256.Sum256(line)
	out, err := sjson.SetBytes(bytes.Clone(line), "id", hex.EncodeToString(h[:10]))
	if err != nil {
		return nil, fmt.Errorf("add event id: %w", err)
	}
	return out, nil
}

// Import formats, as `replay import --format` names them.
const (
	FormatTauBench = "tau-bench" // a tau-bench historical_trajectories JSON array
	FormatJSONL    = "jsonl"     // replay events or `replay export` rows, one JSON object a line
	FormatParquet  = "parquet"   // a `replay export --format parquet` file
)

// ErrUnknownFormat is returned by DetectFormat for input of no import format.
var ErrUnknownFormat = errors.New("not a tau-bench JSON array (starts with [), JSON Lines of replay events or export rows (starts with {) or a replay export Parquet file (starts with PAR1)")

// DetectFormat names the import format of a file from its first bytes: Parquet's
// magic "PAR1", a JSON array (tau-bench), or a JSON object a line (events or export
// rows, told apart line by line by ImportJSONL).
func DetectFormat(head []byte) (string, error) {
	if bytes.HasPrefix(head, []byte("PAR1")) {
		return FormatParquet, nil
	}
	head = bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	switch {
	case len(head) == 0:
		return "", fmt.Errorf("empty input: %w", ErrUnknownFormat)
	case head[0] == '[':
		return FormatTauBench, nil
	case head[0] == '{':
		return FormatJSONL, nil
	}
	return "", ErrUnknownFormat
}

// isExportRow tells a `replay export` JSON line from a replay event: rows have no
// "type" (every event has one) but an episode_id and messages.
func isExportRow(line []byte) bool {
	r := gjson.GetManyBytes(line, "type", "v", "episode_id", "messages")
	return !r[0].Exists() && !r[1].Exists() && r[2].Exists() && r[3].IsArray()
}

func importRowLine(line []byte, emit func([]byte) error) (int, error) {
	var row Row
	if err := json.Unmarshal(line, &row); err != nil {
		return 0, fmt.Errorf("export row: %w", err)
	}
	return emitRow(row, emit)
}

// ImportParquetPart reads a `replay export --format parquet` file, or a part file of
// a partitioned export, and emits the events of each row (see RowEvents): the arm,
// task id and experiment that its path names (…/arm=cam/task_id=t1/part-00000.parquet)
// and the file does not repeat fill its rows. Parquet needs random access: the footer holds
// the schema.
func ImportParquetPart(path string, r io.ReaderAt, size int64, emit func(line []byte) error) (episodes, events int, err error) {
	fill := func(*Row) {}
	for _, seg := range strings.Split(filepath.ToSlash(filepath.Dir(path)), "/") {
		k, v, ok := strings.Cut(seg, "=")
		if !ok {
			continue
		}
		v = hiveUnescape(v)
		if v == hiveNull {
			v = ""
		}
		switch prev := fill; partitionColumn(hiveUnescape(k)) {
		case PartitionArm:
			fill = func(r *Row) { prev(r); r.Arm = cmp.Or(r.Arm, v) }
		case PartitionTask:
			fill = func(r *Row) { prev(r); r.TaskID = cmp.Or(r.TaskID, v) }
		case PartitionExperiment:
			fill = func(r *Row) { prev(r); r.Experiment = cmp.Or(r.Experiment, v) }
		}
	}
	return importParquet(r, size, fill, emit)
}

func importParquet(r io.ReaderAt, size int64, fill func(*Row), emit func(line []byte) error) (episodes, events int, err error) {
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return 0, 0, fmt.Errorf("parquet: %w", err)
	}
	rd := parquet.NewGenericReader[parquetRow](f)
	defer rd.Close()
	buf := make([]parquetRow, 64)
	for {
		n, rerr := rd.Read(buf)
		for i := range buf[:n] {
			row := fromParquet(buf[i])
			if fill != nil {
				fill(&row)
			}
			k, err := emitRow(row, emit)
			events += k
			if err != nil {
				return episodes, events, fmt.Errorf("parquet row %d: %w", episodes, err)
			}
			episodes++
		}
		if errors.Is(rerr, io.EOF) {
			return episodes, events, nil
		}
		if rerr != nil {
			return episodes, events, fmt.Errorf("parquet row %d: %w", episodes, rerr)
		}
		clear(buf)
	}
}

func emitRow(row Row, emit func([]byte) error) (int, error) {
	events, err := RowEvents(row)
	if err != nil {
		return 0, err
	}
	for i, ev := range events {
		line, err := json.Marshal(ev)
		if err != nil {
			return i, fmt.Errorf("%s: encode: %w", row.EpisodeID, err)
		}
		if err := emit(line); err != nil {
			return i, err
		}
	}
	return len(events), nil
}

// RowEvents turns an exported row back into the events a reader reassembles into
// the same row: an episode event, Turns steps whose messages and answers concatenate
// to the row's messages (cut after each assistant message, as ImportTauBench does,
// the surplus merged into the last step), and a reward event when the row has a
// reward. What a row does not hold (step timings, usage, the reward's metadata) is
// not invented: usage is zero, and times are synthesised as an import's are (see
// replay.SynthesisedSpan), so that a report shows no wall time for them. Ids are derived
// from the episode id and turn, as ImportTauBench derives them, so that importing
// an export of a tau-bench import into the same buffer adds nothing.
func RowEvents(row Row) ([]any, error) {
	if row.EpisodeID == "" {
		return nil, errors.New("export row has no episode_id")
	}
	if row.Turns < 0 {
		return nil, fmt.Errorf("export row %s: turns %d", row.EpisodeID, row.Turns)
	}
	id := row.EpisodeID
	started := row.StartedAt.UTC()
	events := []any{&replay.EpisodeEvent{
		V: replay.Version, Type: replay.TypeEpisode, ID: importEventID(id, replay.TypeEpisode, 0), EpisodeID: id,
		TaskID: row.TaskID, Task: row.Task, Experiment: row.Experiment, Arm: row.Arm, Context: row.Context, StartedAt: started,
	}}
	steps := rowSteps(row.Messages, row.Turns)
	for turn, s := range steps {
		s.V, s.Type, s.EpisodeID, s.Turn, s.Status = replay.Version, replay.TypeStep, id, turn, 200
		s.ID = importEventID(id, replay.TypeStep, turn)
		s.At = started.Add(time.Duration(turn+1) * time.Millisecond)
		events = append(events, s)
	}
	if row.Reward != nil {
		events = append(events, &replay.RewardEvent{
			V: replay.Version, Type: replay.TypeReward, ID: importEventID(id, replay.TypeReward, 0), EpisodeID: id,
			Reward: *row.Reward, Success: row.Success, At: started.Add(time.Duration(len(steps)+1) * time.Millisecond),
		})
	}
	return events, nil
}

// rowSteps splits messages into turns steps. An export's Turns counts the steps
// that carried messages, which need not be one per assistant message (a call whose
// answer was empty, a step after the last answer), so the split is adjusted to it:
// surplus steps are merged into the last one, missing ones added empty at the end.
// Messages without any turn still need a step to be kept.
func rowSteps(msgs []protocol.Message, turns int) []*replay.StepEvent {
	steps := splitSteps(msgs)
	if turns == 0 && len(steps) > 0 {
		turns = 1
	}
	if len(steps) > turns {
		last := &replay.StepEvent{Messages: []protocol.Message{}}
		for _, s := range steps[turns-1:] {
			if last.Response != nil {
				last.Messages = append(last.Messages, *last.Response)
			}
			last.Messages = append(last.Messages, s.Messages...)
			last.Response = s.Response
		}
		steps = append(steps[:turns-1], last)
	}
	for len(steps) < turns {
		steps = append(steps, &replay.StepEvent{Messages: []protocol.Message{}})
	}
	return steps
}

// fromParquet is toParquet's inverse.
func fromParquet(p parquetRow) Row {
	r := Row{EpisodeID: p.EpisodeID, TaskID: p.TaskID, Task: p.Task, Experiment: p.Experiment, Arm: p.Arm, Context: p.Context,
		Turns: int(p.Turns), Reward: p.Reward, Success: p.Success, StartedAt: p.StartedAt,
		Messages: make([]protocol.Message, len(p.Messages))}
	for i, pm := range p.Messages {
		m := protocol.Message{Role: pm.Role, Content: pm.Content, ToolCallID: pm.ToolCallID, Name: pm.Name}
		for _, tc := range pm.ToolCalls {
			c := protocol.ToolCall{ID: tc.ID, Type: tc.Type}
			switch {
			case tc.Custom != nil:
				c.Name, c.Arguments = tc.Custom.Name, tc.Custom.Input
			case tc.Function != nil:
				c.Name, c.Arguments = tc.Function.Name, tc.Function.Arguments
			}
			m.ToolCalls = append(m.ToolCalls, c)
		}
		for _, pp := range pm.ContentParts {
			m.Parts = append(m.Parts, fromParquetPart(pp))
		}
		for _, raw := range pm.Raw {
			m.Raw = append(m.Raw, protocol.RawJSON(raw))
		}
		r.Messages[i] = m
	}
	return r
}

func fromParquetPart(p parquetPart) protocol.Part {
	if p.Raw != nil {
		var out protocol.Part
		if json.Unmarshal([]byte(*p.Raw), &out) == nil {
			return out
		}
		return protocol.Part{Type: p.Type, Raw: protocol.RawJSON(*p.Raw)}
	}
	out := protocol.Part{Type: p.Type}
	if p.Text != nil {
		out.Text = *p.Text
	}
	pm := p.ImageURL
	if pm == nil {
		pm = p.InputAudio
	}
	if pm == nil {
		pm = p.File
	}
	if pm != nil {
		out.Media = &protocol.Media{URL: deref(pm.URL), Detail: deref(pm.Detail), FileID: deref(pm.FileID),
			Filename: deref(pm.Filename), Format: deref(pm.Format), Data: deref(pm.Data), SHA256: deref(pm.SHA256),
			MediaType: deref(pm.MediaType)}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
