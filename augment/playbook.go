package augment

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// PlaybookOptions configures a playbook augmenter (mapped from config.Augmenter).
type PlaybookOptions struct {
	Name       string // augmenter name, used in errors and logs
	File       string // ACE text or RCL JSON
	TopN       int    // > 0: only the N bullets with the highest helpful - harmful; 0 = all
	CheckEvery time.Duration
	Logger     *slog.Logger // nil = no logs
}

// Playbook serves the ACE / RCL baselines: one playbook, rendered as the same
// context for every task. The file is reloaded when it changes.
//
// Two file formats are read, told apart by the first non-space byte:
//
//   - ACE's text: "## SECTION" headers and bullet lines
//     "[id] helpful=N harmful=M :: content" (counters optional, "- " prefix
//     allowed; a "- content" line without an id is a bullet with no counters).
//     A "# Title" line is skipped; any other text line continues the bullet above.
//   - RCL's JSON: {"version": …, "entries": [{"content", "section", "helpful",
//     "harmful", "id", …}]}.
//
// The rendering lists the sections in file order, each as "## NAME" followed by
// its bullets as "- content", sections separated by a blank line. A section
// named twice is one section; bullets before any header have no header.
type Playbook struct {
	o     PlaybookOptions
	log   *slog.Logger
	cur   atomic.Pointer[renderedPlaybook]
	watch *watchedFile
}

type renderedPlaybook struct {
	text    string
	version string
	bullets int // bullets in the file (rendered or not)
}

// NewPlaybook loads and renders the playbook; a file that cannot be read or
// parsed is an error.
func NewPlaybook(o PlaybookOptions) (*Playbook, error) {
	if o.File == "" {
		return nil, fmt.Errorf("augment: playbook %q: file is empty", o.Name)
	}
	if o.TopN < 0 {
		return nil, fmt.Errorf("augment: playbook %q: top_n must be >= 0, got %d", o.Name, o.TopN)
	}
	p := &Playbook{o: o, log: o.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	what := fmt.Sprintf("augment: playbook %q", o.Name)
	p.watch = newWatchedFile(what, o.File, o.CheckEvery, p.log, p.load)
	if err := p.watch.reload(context.Background()); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return p, nil
}

// Augment returns the rendered playbook, the same for every task; an empty
// playbook is ErrEmpty.
func (p *Playbook) Augment(context.Context, Request) (string, error) {
	p.watch.poll()
	cur := p.cur.Load()
	if cur.text == "" {
		return "", fmt.Errorf("augment: playbook %q: %w", p.o.Name, ErrEmpty)
	}
	return cur.text, nil
}

// Version is a short hash of the rendered playbook.
// It also looks at the file (at most once a second): the cache key carries the
// version, so an edited playbook must change it even while every task is a cache hit.
func (p *Playbook) Version() string {
	p.watch.poll()
	return p.cur.Load().version
}

// Text is the rendered playbook ("" when it has no bullets).
func (p *Playbook) Text() string { return p.cur.Load().text }

// Reload loads the file now, whether or not it changed. On error the loaded
// playbook keeps serving.
func (p *Playbook) Reload(ctx context.Context) error { return p.watch.reload(ctx) }

// Close stops reloading and waits for a reload in progress.
func (p *Playbook) Close() error {
	p.watch.close()
	return nil
}

func (p *Playbook) load(_ context.Context, data []byte) error {
	sections, err := ParsePlaybook(data)
	if err != nil {
		return err
	}
	text := RenderPlaybook(sections, p.o.TopN)
	sum := sha256.Sum256([]byte(text))
	r := &renderedPlaybook{text: text, version: hex.EncodeToString(sum[:6])}
	for _, s := range sections {
		r.bullets += len(s.Bullets)
	}
	p.cur.Store(r)
	p.log.Info("augment: playbook loaded", "augmenter", p.o.Name, "file", p.o.File, "sections", len(sections),
		"bullets", r.bullets, "version", r.version)
	return nil
}

// PlaybookSection is one section of a playbook, with its bullets in file order.
type PlaybookSection struct {
	Name    string // "" for bullets before any header
	Bullets []PlaybookBullet
}

// PlaybookBullet is one playbook entry.
type PlaybookBullet struct {
	ID      string
	Helpful float64
	Harmful float64
	Content string
}

// ParsePlaybook parses a playbook in ACE's text form or RCL's JSON (a file whose
// first non-space byte is "{"). Sections are in order of first appearance;
// bullets with no content are dropped.
func ParsePlaybook(data []byte) ([]PlaybookSection, error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return parseRCL(data)
	}
	return parseACE(data)
}

// grouper collects bullets into sections in order of first appearance.
type grouper struct {
	sections []PlaybookSection
	at       map[string]int
}

func (g *grouper) section(name string) *PlaybookSection {
	if g.at == nil {
		g.at = map[string]int{}
	}
	i, ok := g.at[name]
	if !ok {
		i = len(g.sections)
		g.at[name] = i
		g.sections = append(g.sections, PlaybookSection{Name: name})
	}
	return &g.sections[i]
}

// result drops bullets without content and sections without bullets.
func (g *grouper) result() []PlaybookSection {
	out := g.sections[:0]
	for _, s := range g.sections {
		s.Bullets = slices.DeleteFunc(s.Bullets, func(b PlaybookBullet) bool { return strings.TrimSpace(b.Content) == "" })
		if len(s.Bullets) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// aceBullet matches "[id] counters :: content"; counters may be empty.
var aceBullet = regexp.MustCompile(`^\[([^\]]*)\]\s*(.*?)\s*::\s?(.*)$`)

func parseACE(data []byte) ([]PlaybookSection, error) {
	var (
		g    grouper
		cur  = "" // current section
		last = -1 // index of the current section's last bullet, -1 = none
		errs []error
	)
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t\r")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "##"):
			cur = strings.TrimSpace(strings.TrimLeft(trimmed, "#"))
			g.section(cur)
			last = -1
			continue
		case strings.HasPrefix(trimmed, "# "), trimmed == "#":
			continue // a title
		}
		body, dashed := strings.CutPrefix(trimmed, "- ")
		if !dashed {
			body, dashed = strings.CutPrefix(trimmed, "* ")
		}
		sec := g.section(cur)
		if m := aceBullet.FindStringSubmatch(body); m != nil {
			b := PlaybookBullet{ID: strings.TrimSpace(m[1]), Content: strings.TrimSpace(m[3])}
			err := parseCounters(m[2], &b)
			switch {
			case err == nil:
				sec.Bullets = append(sec.Bullets, b)
				last = len(sec.Bullets) - 1
				continue
			case !dashed:
				errs = append(errs, fmt.Errorf("line %d: %w", n+1, err))
				continue
			}
			// "- [note] use a::b": a plain bullet that happens to hold "::".
		}
		switch {
		case dashed:
			sec.Bullets = append(sec.Bullets, PlaybookBullet{Content: strings.TrimSpace(body)})
			last = len(sec.Bullets) - 1
		case last >= 0:
			sec.Bullets[last].Content += "\n" + trimmed
		default:
			errs = append(errs, fmt.Errorf("line %d: expected a \"## SECTION\" header or a bullet such as "+
				"\"[id] helpful=1 harmful=0 :: content\", got %q", n+1, clip(trimmed, 60)))
		}
		if len(errs) > 10 {
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g.result(), nil
}

// parseCounters reads "helpful=N harmful=M" (either, both, or none, any order);
// other name=value counters are ignored.
func parseCounters(s string, b *PlaybookBullet) error {
	for _, f := range strings.Fields(s) {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%q before \"::\" is not a counter such as helpful=1", f)
		}
		var dst *float64
		switch name {
		case "helpful":
			dst = &b.Helpful
		case "harmful":
			dst = &b.Harmful
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s=%q is not a number", name, value)
		}
		*dst = v
	}
	return nil
}

func parseRCL(data []byte) ([]PlaybookSection, error) {
	var doc struct {
		Version json.RawMessage `json:"version"`
		Entries *[]struct {
			ID      json.RawMessage `json:"id"`
			Content string          `json:"content"`
			Section string          `json:"section"`
			Helpful float64         `json:"helpful"`
			Harmful float64         `json:"harmful"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("line %d: invalid JSON: %w", 1+bytes.Count(data[:se.Offset], []byte("\n")), err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("line %d: %s: expected %s, got a JSON %s",
				1+bytes.Count(data[:te.Offset], []byte("\n")), te.Field, te.Type, te.Value)
		}
		return nil, fmt.Errorf("invalid RCL playbook: %w", err)
	}
	if doc.Entries == nil {
		return nil, errors.New(`an RCL playbook needs "entries": [{"content", "section", …}]`)
	}
	var g grouper
	for _, e := range *doc.Entries {
		id := strings.Trim(string(e.ID), `"`)
		if id == "null" {
			id = ""
		}
		sec := g.section(strings.TrimSpace(e.Section))
		sec.Bullets = append(sec.Bullets, PlaybookBullet{ID: id, Helpful: e.Helpful, Harmful: e.Harmful,
			Content: strings.TrimSpace(e.Content)})
	}
	return g.result(), nil
}

// RenderPlaybook renders sections as one context. topN > 0 keeps only the topN
// bullets with the highest helpful - harmful (ties: file order), each in its
// section and in file order.
func RenderPlaybook(sections []PlaybookSection, topN int) string {
	type ref struct{ s, b int }
	var all []ref
	for i, s := range sections {
		for j := range s.Bullets {
			all = append(all, ref{i, j})
		}
	}
	keep := func(ref) bool { return true }
	if topN > 0 && topN < len(all) {
		net := func(r ref) float64 { b := sections[r.s].Bullets[r.b]; return b.Helpful - b.Harmful }
		ranked := slices.Clone(all)
		slices.SortStableFunc(ranked, func(a, b ref) int { return cmp.Compare(net(b), net(a)) })
		chosen := map[ref]bool{}
		for _, r := range ranked[:topN] {
			chosen[r] = true
		}
		keep = func(r ref) bool { return chosen[r] }
	}
	var out strings.Builder
	for i, s := range sections {
		var lines []string
		for j, b := range s.Bullets {
			if keep(ref{i, j}) {
				lines = append(lines, "- "+strings.ReplaceAll(b.Content, "\n", "\n  "))
			}
		}
		if len(lines) == 0 {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n\n")
		}
		if s.Name != "" {
			out.WriteString("## " + s.Name + "\n")
		}
		out.WriteString(strings.Join(lines, "\n"))
	}
	return out.String()
}

// clip shortens s to at most n runes for a message.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
