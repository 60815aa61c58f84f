package replay

import (
	"bufio"
	"bytes"
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

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/protocol"
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

// importEpoch is the fixed start time of imported episodes: imports must be
// byte-for-byte reproducible, so nothing may depend on the clock.
var importEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

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
	started := importEpoch.Add(time.Duration(index) * time.Second)
	events := []any{&EpisodeEvent{
		V: Version, Type: TypeEpisode, ID: importEventID(episodeID, TypeEpisode, 0),
		EpisodeID: episodeID, TaskID: "tau-" + o.Domain + "-" + taskID, Task: run.Info.Task.Instruction,
		Arm: o.Arm, ContextSource: "none", Protocol: "openai", StartedAt: started,
	}}
	steps := splitSteps(msgs)
	for turn, s := range steps {
		s.V, s.Type, s.EpisodeID, s.Turn, s.Status = Version, TypeStep, episodeID, turn, 200
		s.ID = importEventID(episodeID, TypeStep, turn)
		s.At = started.Add(time.Duration(turn+1) * time.Millisecond)
		events = append(events, s)
	}
	events = append(events, tauReward(run, episodeID, o.Domain, taskID, trial, started.Add(time.Duration(len(steps)+1)*time.Millisecond)))
	return events, nil
}

// tauReward records the run's verdict; tau-bench counts a run as solved only at
// reward 1, and the metadata says where the episode came from.
func tauReward(run *tauRun, episodeID, domain, taskID, trial string, at time.Time) *RewardEvent {
	success := run.Reward >= 1
	meta, _ := json.Marshal(map[string]string{"source": "tau-bench", "domain": domain, "task_id": taskID, "trial": trial})
	return &RewardEvent{
		V: Version, Type: TypeReward, ID: importEventID(episodeID, TypeReward, 0),
		EpisodeID: episodeID, Reward: run.Reward, Success: &success, Metadata: meta, At: at,
	}
}

// splitSteps cuts a trajectory into calls the way the proxy would have recorded
// them: each call sends the messages new since the previous answer and gets one
// assistant answer. Messages after the last answer (the user's goodbye, a tool result)
// become a final step without an answer, so the reassembled trajectory is complete.
func splitSteps(msgs []protocol.Message) []*StepEvent {
	var steps []*StepEvent
	start := 0
	for i := range msgs {
		if msgs[i].Role != "assistant" {
			continue
		}
		resp := msgs[i]
		steps = append(steps, &StepEvent{Messages: nonNil(msgs[start:i]), Response: &resp})
		start = i + 1
	}
	if start < len(msgs) {
		steps = append(steps, &StepEvent{Messages: msgs[start:]})
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
// with Decode so that a sink never receives a line a reader would reject. Blank lines
// are skipped; the first bad line stops the import with an error naming its number.
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
	if _, err := Decode(line); err != nil {
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
