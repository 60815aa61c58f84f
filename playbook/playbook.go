// Package playbook owns the learned playbook as data: its entries, RCL's JSON and
// ACE's text form, the renderings the agent and the optimiser models see, the
// deterministic edits those models make through tool calls. Its versions, kept in a
// directory, an S3 prefix or Redis, are package playbook/storage's.
//
// RCL's JSON is read and written as RCL's PlaybookEntry.to_dict/from_dict do:
//
//	{"entries": [{"content", "section", "entry_id", "helpful_count", "harmful_count"}], "version": "1.0"}
//
// with "section" defaulting to "others" (RCL's seed playbooks carry only content and
// section). camproxy's provenance rides in one more key per entry, "camproxy":
// {"version", "sources"}, which RCL's from_dict ignores; any other unknown key, of an
// entry or of the file, is kept as it was read.
package playbook

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultSection is RCL's section for an entry that names none.
const DefaultSection = "others"

// FormatVersion is the "version" RCL writes at the top of a playbook file.
const FormatVersion = "1.0"

// Entry is one piece of guidance.
type Entry struct {
	ID      string // entry_id
	Section string // "others" when the file names none
	Content string
	Helpful int // helpful_count
	Harmful int // harmful_count

	// Version is the playbook version that added or last changed the entry (0 = not
	// known: a seed, or a file another tool wrote).
	Version int
	// Sources are the episode ids whose reflection added or last changed it.
	Sources []string

	extra []member // unknown keys, written back after the known ones
}

// Net is helpful − harmful: how top_n, pruning and the size budget rank entries.
func (e *Entry) Net() int { return e.Helpful - e.Harmful }

// member is one unknown key of a JSON object, kept verbatim.
type member struct {
	Key   string
	Value json.RawMessage
}

// Playbook is an ordered list of entries. The order is the file's: sections are
// rendered in order of first appearance, and "oldest first" means earliest in it.
type Playbook struct {
	Entries []Entry
	extra   []member // unknown top-level keys
}

// Clone returns a deep copy.
func (p *Playbook) Clone() *Playbook {
	c := &Playbook{Entries: make([]Entry, len(p.Entries)), extra: slices.Clone(p.extra)}
	for i, e := range p.Entries {
		e.Sources = slices.Clone(e.Sources)
		e.extra = slices.Clone(e.extra)
		c.Entries[i] = e
	}
	return c
}

// Index returns the position of the entry with id, or -1.
func (p *Playbook) Index(id string) int {
	return slices.IndexFunc(p.Entries, func(e Entry) bool { return e.ID == id })
}

// Get returns the entry with id.
func (p *Playbook) Get(id string) (Entry, bool) {
	if i := p.Index(id); i >= 0 {
		return p.Entries[i], true
	}
	return Entry{}, false
}

// Normalize is how duplicates are compared: lowercased, whitespace collapsed.
func Normalize(content string) string {
	return strings.Join(strings.Fields(strings.ToLower(content)), " ")
}

// Parse reads a playbook in RCL's JSON (first non-space byte "{") or ACE's text.
func Parse(data []byte) (*Playbook, error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if !utf8.Valid(data) {
		return nil, errors.New("a playbook must be UTF-8 text")
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return ParseJSON(data)
	}
	return ParseACE(data)
}

// ParseJSON reads RCL's JSON. An entry without entry_id gets a stable id derived
// from its section and content (RCL draws a random one on every load, so a seed's
// entries would change id between loads).
func ParseJSON(data []byte) (*Playbook, error) {
	var top []member
	if err := decodeObject(data, &top); err != nil {
		return nil, jsonErr(data, err)
	}
	p := &Playbook{}
	var entries json.RawMessage
	for _, m := range top {
		switch m.Key {
		case "entries":
			entries = m.Value
		case "version":
			// RCL writes "1.0" and never reads it; it is written back as "1.0".
		default:
			p.extra = append(p.extra, m)
		}
	}
	if entries == nil {
		return nil, errors.New(`an RCL playbook needs "entries": [{"content", "section", …}]`)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(entries, &raw); err != nil {
		return nil, fmt.Errorf(`"entries" must be an array of objects: %w`, err)
	}
	seen := map[string]bool{}
	for i, r := range raw {
		e, err := parseEntry(r)
		if err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		if e.ID == "" {
			e.ID = stableID(e.Section, e.Content, seen)
		}
		if seen[e.ID] {
			return nil, fmt.Errorf("entries[%d]: entry_id %q is used twice", i, e.ID)
		}
		seen[e.ID] = true
		p.Entries = append(p.Entries, e)
	}
	return p, nil
}

func parseEntry(data json.RawMessage) (Entry, error) {
	var ms []member
	if err := decodeObject(data, &ms); err != nil {
		return Entry{}, err
	}
	e := Entry{Section: DefaultSection}
	hasContent := false
	for _, m := range ms {
		var err error
		switch m.Key {
		case "content":
			err = json.Unmarshal(m.Value, &e.Content)
			hasContent = true
		case "section":
			var s *string
			if err = json.Unmarshal(m.Value, &s); err == nil && s != nil && strings.TrimSpace(*s) != "" {
				e.Section = *s
			}
		case "entry_id":
			var id any
			if err = json.Unmarshal(m.Value, &id); err == nil {
				switch v := id.(type) {
				case string:
					e.ID = v
				case float64:
					e.ID = strings.TrimSpace(string(m.Value))
				case nil:
				default:
					err = errors.New("must be a string")
				}
			}
		case "helpful_count":
			e.Helpful, err = count(m.Value)
		case "harmful_count":
			e.Harmful, err = count(m.Value)
		case "camproxy":
			var prov struct {
				Version int      `json:"version"`
				Sources []string `json:"sources"`
			}
			err = json.Unmarshal(m.Value, &prov)
			e.Version, e.Sources = prov.Version, prov.Sources
		default:
			e.extra = append(e.extra, m)
		}
		if err != nil {
			return Entry{}, fmt.Errorf("%s: %w", m.Key, err)
		}
	}
	if !hasContent {
		return Entry{}, errors.New(`"content" is required`)
	}
	return e, nil
}

// count reads a counter: RCL writes integers; a float with no fraction is accepted.
func count(v json.RawMessage) (int, error) {
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, errors.New("must be a number")
	}
	if f != math.Trunc(f) || f < 0 || f > 1e9 {
		return 0, fmt.Errorf("must be a whole number ≥ 0, got %s", v)
	}
	return int(f), nil
}

// decodeObject reads a JSON object's members in order, values raw.
func decodeObject(data []byte, out *[]member) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("must be a JSON object")
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		key := k.(string)
		if i := slices.IndexFunc(*out, func(m member) bool { return m.Key == key }); i >= 0 {
			(*out)[i].Value = v // the last of a repeated key wins, as in Python's json
			continue
		}
		*out = append(*out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("data after the JSON object")
	}
	return nil
}

func jsonErr(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("line %d: invalid JSON: %w", 1+bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n")), err)
	}
	return fmt.Errorf("invalid RCL playbook: %w", err)
}

// stableID derives an 8-hex-digit id (RCL's length) from section and content, unique in seen.
func stableID(section, content string, seen map[string]bool) string {
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(section + "\x00" + content + "\x00" + strconv.Itoa(n)))
		id := hex.EncodeToString(sum[:4])
		if !seen[id] {
			return id
		}
	}
}

// JSON writes RCL's form: {"entries": [...], "version": "1.0"}, two-space indent,
// each entry's keys in to_dict's order, then camproxy's provenance, then unknown keys.
func (p *Playbook) JSON() []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"entries\": [")
	for i, e := range p.Entries {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n    {")
		field := func(first bool, k string, v any) {
			if !first {
				b.WriteString(",")
			}
			b.WriteString("\n      ")
			b.Write(mustJSON(k))
			b.WriteString(": ")
			if raw, ok := v.(json.RawMessage); ok {
				b.Write(indentRaw(raw, "      "))
				return
			}
			b.Write(mustJSON(v))
		}
		field(true, "content", e.Content)
		field(false, "section", cmp.Or(e.Section, DefaultSection))
		field(false, "entry_id", e.ID)
		field(false, "helpful_count", e.Helpful)
		field(false, "harmful_count", e.Harmful)
		if e.Version > 0 || len(e.Sources) > 0 {
			prov := struct {
				Version int      `json:"version"`
				Sources []string `json:"sources,omitempty"`
			}{e.Version, e.Sources}
			field(false, "camproxy", json.RawMessage(mustJSON(prov)))
		}
		for _, m := range e.extra {
			field(false, m.Key, m.Value)
		}
		b.WriteString("\n    }")
	}
	if len(p.Entries) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("],\n  \"version\": \"" + FormatVersion + "\"")
	for _, m := range p.extra {
		b.WriteString(",\n  ")
		b.Write(mustJSON(m.Key))
		b.WriteString(": ")
		b.Write(indentRaw(m.Value, "  "))
	}
	b.WriteString("\n}\n")
	return b.Bytes()
}

func mustJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // strings, ints and slices of strings always encode
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

func indentRaw(raw json.RawMessage, prefix string) []byte {
	var b bytes.Buffer
	if json.Indent(&b, raw, prefix, "  ") != nil {
		return raw
	}
	return b.Bytes()
}

// ACE writes ACE's text form: a "## SECTION" header per section in order of first
// appearance, then "[id] helpful=N harmful=M :: content" per entry. A content's
// line breaks continue the bullet on the next lines.
func (p *Playbook) ACE() string {
	var b strings.Builder
	for i, s := range p.Sections() {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("## " + s.Name + "\n")
		for _, e := range s.Entries {
			fmt.Fprintf(&b, "[%s] helpful=%d harmful=%d :: %s\n", e.ID, e.Helpful, e.Harmful, oneBullet(e.Content))
		}
	}
	return b.String()
}

// oneBullet keeps a multi-line content's continuation lines from reading as headers
// or bullets of their own.
func oneBullet(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := 1; i < len(lines); i++ {
		lines[i] = "  " + strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "\n")
}

// Section is one section with its entries in playbook order.
type Section struct {
	Name    string
	Entries []Entry
}

// Sections groups the entries by section, sections in order of first appearance.
func (p *Playbook) Sections() []Section {
	var out []Section
	at := map[string]int{}
	for _, e := range p.Entries {
		name := cmp.Or(e.Section, DefaultSection)
		i, ok := at[name]
		if !ok {
			i = len(out)
			at[name] = i
			out = append(out, Section{Name: name})
		}
		out[i].Entries = append(out[i].Entries, e)
	}
	return out
}

// aceBullet matches "[id] counters :: content"; counters may be empty.
var aceBullet = regexp.MustCompile(`^\[([^\]]*)\]\s*(.*?)\s*::\s?(.*)$`)

// aceBare matches "[id] content": ACE-AppWorld's stored playbooks carry no counters.
var aceBare = regexp.MustCompile(`^\[([A-Za-z0-9_.:-]+)\]\s+(.+)$`)

// ParseACE reads ACE's text form: "## SECTION" headers, bullet lines
// "[id] helpful=N harmful=M :: content" (counters optional, "- " prefix allowed),
// "[id] content" and "- content" bullets. A "# Title" line is skipped; any other
// line continues the bullet above. Bullets before any header have no section (""):
// the context shows them without a header, RCL's JSON writes them as "others".
// Sections without bullets vanish.
func ParseACE(data []byte) (*Playbook, error) {
	p := &Playbook{}
	var errs []error
	section := ""
	last := -1
	seen := map[string]bool{}
	for n, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "##"):
			section = strings.TrimSuffix(strings.TrimSpace(strings.TrimLeft(trimmed, "#")), ":")
			last = -1
			continue
		case strings.HasPrefix(trimmed, "# "), trimmed == "#":
			continue
		}
		body, dashed := strings.CutPrefix(trimmed, "- ")
		if !dashed {
			body, dashed = strings.CutPrefix(trimmed, "* ")
		}
		e := Entry{Section: section}
		ok := false
		if m := aceBullet.FindStringSubmatch(body); m != nil {
			if err := parseCounters(m[2], &e); err == nil {
				e.ID, e.Content, ok = strings.TrimSpace(m[1]), strings.TrimSpace(m[3]), true
			} else if !dashed {
				errs = append(errs, fmt.Errorf("line %d: %w", n+1, err))
				continue
			}
		}
		if !ok {
			if m := aceBare.FindStringSubmatch(body); m != nil && !dashed {
				e.ID, e.Content, ok = m[1], strings.TrimSpace(m[2]), true
			}
		}
		switch {
		case ok:
		case dashed:
			e.Content, ok = strings.TrimSpace(body), true
		case last >= 0:
			p.Entries[last].Content += "\n" + trimmed
			continue
		default:
			errs = append(errs, fmt.Errorf("line %d: expected a \"## SECTION\" header or a bullet such as "+
				"\"[id] helpful=1 harmful=0 :: content\", got %q", n+1, clipRunes(trimmed, 60)))
			if len(errs) > 10 {
				return nil, errors.Join(errs...)
			}
			continue
		}
		if e.Content == "" {
			last = -1
			continue
		}
		if e.ID == "" {
			e.ID = stableID(e.Section, e.Content, seen)
		}
		if seen[e.ID] {
			errs = append(errs, fmt.Errorf("line %d: id %q is used twice", n+1, e.ID))
			continue
		}
		seen[e.ID] = true
		p.Entries = append(p.Entries, e)
		last = len(p.Entries) - 1
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// parseCounters reads "helpful=N harmful=M" (either, both or none, any order); other
// name=value counters are ignored.
func parseCounters(s string, e *Entry) error {
	for _, f := range strings.Fields(s) {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%q before \"::\" is not a counter such as helpful=1", f)
		}
		var dst *int
		switch name {
		case "helpful":
			dst = &e.Helpful
		case "harmful":
			dst = &e.Harmful
		default:
			continue
		}
		v, err := count(json.RawMessage(value))
		if err != nil {
			return fmt.Errorf("%s=%q is not a whole number", name, value)
		}
		*dst = v
	}
	return nil
}

// Context renders the playbook as the context an agent receives: the sections in
// order, each as "## NAME" (none for entries without a section) and its entries as
// "- content", sections separated by a blank line; empty contents are left out. topN > 0 keeps only the topN entries with the highest helpful −
// harmful (ties: playbook order), each in its place.
func (p *Playbook) Context(topN int) string {
	keep := func(int) bool { return true }
	if topN > 0 && topN < len(p.Entries) {
		idx := make([]int, len(p.Entries))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(p.Entries[b].Net(), p.Entries[a].Net()) })
		chosen := map[int]bool{}
		for _, i := range idx[:topN] {
			chosen[i] = true
		}
		keep = func(i int) bool { return chosen[i] }
	}
	var out strings.Builder
	type sec struct {
		name  string
		lines []string
	}
	var secs []sec
	at := map[string]int{}
	for i, e := range p.Entries {
		if !keep(i) || strings.TrimSpace(e.Content) == "" {
			continue
		}
		name := e.Section
		j, ok := at[name]
		if !ok {
			j = len(secs)
			at[name] = j
			secs = append(secs, sec{name: name})
		}
		secs[j].lines = append(secs[j].lines, "- "+strings.ReplaceAll(strings.TrimSpace(e.Content), "\n", "\n  "))
	}
	for i, s := range secs {
		if i > 0 {
			out.WriteString("\n\n")
		}
		if s.name != "" {
			out.WriteString("## " + s.name + "\n")
		}
		out.WriteString(strings.Join(s.lines, "\n"))
	}
	return out.String()
}

// Lines renders the playbook as the optimiser models see it: one
// "[entry_id] (section) content" line per entry, in playbook order (line breaks
// in a content become spaces). An empty playbook is "(the playbook is empty)".
func (p *Playbook) Lines() string {
	if len(p.Entries) == 0 {
		return "(the playbook is empty)"
	}
	var b strings.Builder
	for _, e := range p.Entries {
		fmt.Fprintf(&b, "[%s] (%s) %s\n", e.ID, cmp.Or(e.Section, DefaultSection), strings.ReplaceAll(strings.TrimSpace(e.Content), "\n", " "))
	}
	return b.String()
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
