package playbook

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The tools through which the reflector and the mutator change a playbook. Their
// names and arguments are a contract (README, "camproxy train playbook").
const (
	ToolTag    = "tag_entry"    // reflector: {entry_id, tag: "helpful"|"harmful"}
	ToolAdd    = "add_entry"    // mutator: {section, content} → the new entry_id
	ToolUpdate = "update_entry" // mutator: {entry_id, content}
	ToolDelete = "delete_entry" // mutator: {entry_id}
	ToolFinish = "finish"       // both: {summary}; ends the model's turn at the playbook
)

// Role says which tools a model may call.
type Role string

const (
	Reflector Role = "reflector" // tag_entry, finish
	Mutator   Role = "mutator"   // add_entry, update_entry, delete_entry, finish
)

// Defaults of Limits.
const (
	DefaultPrune      = 3
	DefaultMaxEntries = 100
	DefaultMaxContent = 2000
)

// Limits bound a playbook after each step.
type Limits struct {
	Prune      int // remove entries whose harmful − helpful ≥ Prune; ≤ 0 = never
	MaxEntries int // at most this many entries (evicting the lowest helpful − harmful, oldest first); ≤ 0 = no bound
	MaxContent int // longest content in characters an add or update may write; ≤ 0 = DefaultMaxContent
}

// DefaultLimits are --prune 3, --max-entries 100 and contents of up to 2000 characters.
func DefaultLimits() Limits {
	return Limits{Prune: DefaultPrune, MaxEntries: DefaultMaxEntries, MaxContent: DefaultMaxContent}
}

// ErrRefused is wrapped by every error Apply returns: the call was bad (an unknown
// entry id, bad arguments, a duplicate) and nothing changed. The caller sends the
// message back to the model as the tool's result.
var ErrRefused = errors.New("refused")

// Op is one applied or refused tool call.
type Op struct {
	Tool    string `json:"tool"`
	EntryID string `json:"entry_id,omitempty"`
	Section string `json:"section,omitempty"`
	Content string `json:"content,omitempty"`
	Tag     string `json:"tag,omitempty"`
	Summary string `json:"summary,omitempty"`
	Error   string `json:"error,omitempty"` // "" = applied
}

// Editor applies tool calls to a copy of a playbook, deterministically: the same
// calls on the same playbook give the same result, new entry ids included.
type Editor struct {
	pb      *Playbook
	version int
	sources []string
	limits  Limits
	ids     map[string]bool // every id the playbook has held: a deleted id is not reused
	Ops     []Op            // every call, in order
	summary map[Role]string
}

// NewEditor edits a copy of base; the edits are attributed to version and to the
// episodes in sources.
func NewEditor(base *Playbook, version int, sources []string, limits Limits) *Editor {
	if limits.MaxContent <= 0 {
		limits.MaxContent = DefaultMaxContent
	}
	e := &Editor{pb: base.Clone(), version: version, sources: slices.Clone(sources), limits: limits,
		ids: map[string]bool{}, summary: map[Role]string{}}
	for _, en := range e.pb.Entries {
		e.ids[en.ID] = true
	}
	return e
}

// Playbook is the edited playbook (not yet pruned or bounded; see Finish).
func (e *Editor) Playbook() *Playbook { return e.pb }

// Summary is what role said in its finish call ("" until it called it).
func (e *Editor) Summary(role Role) string { return e.summary[role] }

// Applied counts the calls that changed the playbook (tags included).
func (e *Editor) Applied() int {
	n := 0
	for _, op := range e.Ops {
		if op.Error == "" && op.Tool != ToolFinish {
			n++
		}
	}
	return n
}

// Allowed reports whether role may call tool.
func Allowed(role Role, tool string) bool {
	switch tool {
	case ToolFinish:
		return true
	case ToolTag:
		return role == Reflector
	case ToolAdd, ToolUpdate, ToolDelete:
		return role == Mutator
	}
	return false
}

// IsTool reports whether name is one of the playbook tools.
func IsTool(name string) bool {
	return name == ToolTag || name == ToolAdd || name == ToolUpdate || name == ToolDelete || name == ToolFinish
}

// Apply runs one tool call of role with its JSON arguments and returns the text the
// model gets back: for add_entry the new entry_id, otherwise a short confirmation.
// A bad call changes nothing and returns an error wrapping ErrRefused whose message
// starts with "error:".
func (e *Editor) Apply(role Role, tool, args string) (string, error) {
	op := Op{Tool: tool}
	out, err := e.apply(role, tool, args, &op)
	if err != nil {
		op.Error = err.Error()
		err = fmt.Errorf("%w: %s", ErrRefused, err.Error())
		e.Ops = append(e.Ops, op)
		return "", refusal{err}
	}
	e.Ops = append(e.Ops, op)
	return out, nil
}

// refusal prints as "error: …" (what the model sees) and unwraps to ErrRefused.
type refusal struct{ err error }

func (r refusal) Error() string {
	return "error: " + strings.TrimPrefix(r.err.Error(), ErrRefused.Error()+": ")
}
func (r refusal) Unwrap() error { return r.err }

// schema is each tool's arguments: name → required?
var schema = map[string]map[string]bool{
	ToolTag:    {"entry_id": true, "tag": true},
	ToolAdd:    {"section": false, "content": true},
	ToolUpdate: {"entry_id": true, "content": true},
	ToolDelete: {"entry_id": true},
	ToolFinish: {"summary": false},
}

func (e *Editor) apply(role Role, tool, args string, op *Op) (string, error) {
	keys, known := schema[tool]
	if !known {
		return "", fmt.Errorf("unknown tool %q", clipRunes(tool, 80))
	}
	if !Allowed(role, tool) {
		return "", fmt.Errorf("%s is not a tool of the %s; its tools are %s", tool, role, strings.Join(RoleTools(role), ", "))
	}
	a, err := arguments(tool, args, keys)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(a["entry_id"])
	op.EntryID = id
	find := func() (int, error) {
		i := e.pb.Index(id)
		if i < 0 {
			return -1, fmt.Errorf("no entry has entry_id %q; the ids are the bracketed ones in the playbook", clipRunes(id, 80))
		}
		return i, nil
	}
	switch tool {
	case ToolTag:
		op.Tag = a["tag"]
		i, err := find()
		if err != nil {
			return "", err
		}
		en := &e.pb.Entries[i]
		switch a["tag"] {
		case "helpful":
			en.Helpful++
		case "harmful":
			en.Harmful++
		default:
			return "", fmt.Errorf(`tag must be "helpful" or "harmful", got %q`, clipRunes(a["tag"], 40))
		}
		return fmt.Sprintf("ok: [%s] helpful=%d harmful=%d", en.ID, en.Helpful, en.Harmful), nil
	case ToolAdd:
		section := cmp.Or(strings.TrimSpace(a["section"]), DefaultSection)
		content, err := e.content(a["content"], -1)
		op.Section, op.Content = section, content
		if err != nil {
			return "", err
		}
		nid := stableID(section, content, e.ids)
		e.ids[nid] = true
		e.pb.Entries = append(e.pb.Entries, Entry{ID: nid, Section: section, Content: content,
			Version: e.version, Sources: slices.Clone(e.sources)})
		op.EntryID = nid
		return nid, nil
	case ToolUpdate:
		i, err := find()
		if err != nil {
			return "", err
		}
		content, err := e.content(a["content"], i)
		op.Content = content
		if err != nil {
			return "", err
		}
		en := &e.pb.Entries[i]
		en.Content, en.Version, en.Sources = content, e.version, slices.Clone(e.sources)
		return "ok: [" + en.ID + "] updated", nil
	case ToolDelete:
		i, err := find()
		if err != nil {
			return "", err
		}
		e.pb.Entries = slices.Delete(e.pb.Entries, i, i+1)
		return "ok: [" + id + "] deleted", nil
	default: // finish
		op.Summary = strings.TrimSpace(a["summary"])
		e.summary[role] = op.Summary
		return "ok: finished", nil
	}
}

// content checks a new content: not empty, not too long, not a duplicate of another
// entry (self is the entry being updated, -1 for none).
func (e *Editor) content(c string, self int) (string, error) {
	c = strings.TrimSpace(c)
	if c == "" {
		return "", errors.New("content is empty")
	}
	if n := utf8.RuneCountInString(c); n > e.limits.MaxContent {
		return c, fmt.Errorf("content is %d characters; at most %d", n, e.limits.MaxContent)
	}
	norm := Normalize(c)
	for i, en := range e.pb.Entries {
		if i != self && Normalize(en.Content) == norm {
			return c, fmt.Errorf("duplicate: entry [%s] already says this", en.ID)
		}
	}
	return c, nil
}

// arguments checks a call's JSON arguments against the tool's schema: an object
// whose keys are the tool's, the required ones present, every value a string.
func arguments(tool, args string, keys map[string]bool) (map[string]string, error) {
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	if !gjson.Valid(args) || !gjson.Parse(args).IsObject() {
		return nil, fmt.Errorf("the arguments of %s must be a JSON object, got %s", tool, clipRunes(args, 120))
	}
	out := map[string]string{}
	var bad error
	gjson.Parse(args).ForEach(func(k, v gjson.Result) bool {
		if _, ok := keys[k.String()]; !ok {
			bad = fmt.Errorf("%s has no argument %q; it takes %s", tool, clipRunes(k.String(), 40), argList(keys))
			return false
		}
		if v.Type != gjson.String {
			bad = fmt.Errorf("%s: %q must be a string", tool, k.String())
			return false
		}
		out[k.String()] = v.String()
		return true
	})
	if bad != nil {
		return nil, bad
	}
	for k, required := range keys {
		if required && strings.TrimSpace(out[k]) == "" {
			return nil, fmt.Errorf("%s needs %q; it takes %s", tool, k, argList(keys))
		}
	}
	return out, nil
}

func argList(keys map[string]bool) string {
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// RoleTools are the playbook tools role may call.
func RoleTools(role Role) []string {
	if role == Reflector {
		return []string{ToolTag, ToolFinish}
	}
	return []string{ToolAdd, ToolUpdate, ToolDelete, ToolFinish}
}

// Finish prunes and bounds the edited playbook (Limits) and returns it with the
// ids of the entries that went.
func (e *Editor) Finish() (*Playbook, []string) {
	return e.pb, Enforce(e.pb, e.limits)
}

// Enforce removes, in place, entries whose harmful − helpful ≥ l.Prune, then the
// lowest helpful − harmful (oldest first) beyond l.MaxEntries. It returns the ids
// removed.
func Enforce(p *Playbook, l Limits) []string {
	var gone []string
	if l.Prune > 0 {
		p.Entries = slices.DeleteFunc(p.Entries, func(en Entry) bool {
			if en.Harmful-en.Helpful >= l.Prune {
				gone = append(gone, en.ID)
				return true
			}
			return false
		})
	}
	if l.MaxEntries > 0 && len(p.Entries) > l.MaxEntries {
		idx := make([]int, len(p.Entries))
		for i := range idx {
			idx[i] = i
		}
		// Lowest net first; ties: the oldest (earliest) first.
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(p.Entries[a].Net(), p.Entries[b].Net()) })
		drop := map[int]bool{}
		for _, i := range idx[:len(p.Entries)-l.MaxEntries] {
			drop[i] = true
			gone = append(gone, p.Entries[i].ID)
		}
		kept := p.Entries[:0]
		for i, en := range p.Entries {
			if !drop[i] {
				kept = append(kept, en)
			}
		}
		p.Entries = kept
	}
	return gone
}

// Tool is a playbook tool as a model sees it: a name, what it does, a JSON schema.
type Tool struct {
	Name        string
	Description string
	Schema      map[string]any
}

// Tools are the JSON-schema descriptions of role's playbook tools.
func Tools(role Role) []Tool {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	obj := func(props map[string]any, required ...string) map[string]any {
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	all := map[string]Tool{
		ToolTag: {ToolTag, "Credit a playbook entry: helpful when following it made a run succeed, harmful when it misled a run into failing.",
			obj(map[string]any{"entry_id": str("the bracketed id of the entry"), "tag": map[string]any{"type": "string", "enum": []string{"helpful", "harmful"}}}, "entry_id", "tag")},
		ToolAdd: {ToolAdd, "Add a new entry to the playbook: one self-contained, actionable rule. Returns the new entry_id.",
			obj(map[string]any{"section": str("the section it belongs to (default \"others\")"), "content": str("the rule, as the agent should read it")}, "content")},
		ToolUpdate: {ToolUpdate, "Rewrite the content of an existing entry.",
			obj(map[string]any{"entry_id": str("the bracketed id of the entry"), "content": str("the new content, in full")}, "entry_id", "content")},
		ToolDelete: {ToolDelete, "Remove an entry that is wrong or misleading.",
			obj(map[string]any{"entry_id": str("the bracketed id of the entry")}, "entry_id")},
		ToolFinish: {ToolFinish, "Say you are done with the playbook for this batch, with a short summary of what you found or changed.",
			obj(map[string]any{"summary": str("what you concluded, in a few sentences")}, "summary")},
	}
	var out []Tool
	for _, name := range RoleTools(role) {
		out = append(out, all[name])
	}
	return out
}

// MarshalOps is the ops as JSON (journals, events).
func MarshalOps(ops []Op) json.RawMessage { return mustJSON(ops) }
