package playbook

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func seed() *Playbook {
	return &Playbook{Entries: []Entry{
		{ID: "e1", Section: "rules", Content: "Check the fare class first.", Helpful: 2},
		{ID: "e2", Section: "rules", Content: "Offer a refund to everyone.", Harmful: 2},
		{ID: "e3", Section: "tools", Content: "Call get_reservation before update.", Helpful: 1, Harmful: 1},
	}}
}

// Every kind of call, applied exactly, in order; refusals change nothing and say why.
func TestEditorApply(t *testing.T) {
	base := seed()
	ed := NewEditor(base, 4, []string{"ep9"}, DefaultLimits())
	steps := []struct {
		role       Role
		tool, args string
		want       string // prefix of the result, or of the refusal
	}{
		{Reflector, ToolTag, `{"entry_id":"e1","tag":"helpful"}`, "ok: [e1] helpful=3 harmful=0"},
		{Reflector, ToolTag, `{"entry_id":"e2","tag":"harmful"}`, "ok: [e2] helpful=0 harmful=3"},
		{Reflector, ToolTag, `{"entry_id":"nope","tag":"helpful"}`, `error: no entry has entry_id "nope"`},
		{Reflector, ToolTag, `{"entry_id":"e1","tag":"neutral"}`, `error: tag must be "helpful" or "harmful"`},
		{Reflector, ToolAdd, `{"content":"x"}`, "error: add_entry is not a tool of the reflector"},
		{Reflector, ToolFinish, `{"summary":"e2 misled run 1"}`, "ok: finished"},
		{Mutator, ToolTag, `{"entry_id":"e1","tag":"helpful"}`, "error: tag_entry is not a tool of the mutator"},
		{Mutator, ToolAdd, `{"section":"rules","content":"Basic economy cannot be changed."}`, ""}, // returns the id
		{Mutator, ToolAdd, `{"section":"other","content":"  basic ECONOMY   cannot be\nchanged. "}`, "error: duplicate: entry ["},
		{Mutator, ToolAdd, `{"content":""}`, `error: add_entry needs "content"`},
		{Mutator, ToolAdd, `not json`, "error: the arguments of add_entry must be a JSON object"},
		{Mutator, ToolAdd, `{"content":"c","why":"x"}`, `error: add_entry has no argument "why"`},
		{Mutator, ToolAdd, `{"content":7}`, `error: add_entry: "content" must be a string`},
		{Mutator, ToolUpdate, `{"entry_id":"e3","content":"Call get_reservation_details before any update."}`, "ok: [e3] updated"},
		{Mutator, ToolUpdate, `{"entry_id":"e3","content":"check the fare class first."}`, "error: duplicate: entry [e1]"},
		{Mutator, ToolDelete, `{"entry_id":"e2"}`, "ok: [e2] deleted"},
		{Mutator, ToolDelete, `{"entry_id":"e2"}`, `error: no entry has entry_id "e2"`},
		{Mutator, "rm_rf", `{}`, `error: unknown tool "rm_rf"`},
		{Mutator, ToolFinish, `{"summary":"added the basic economy rule"}`, "ok: finished"},
	}
	var added string
	for i, s := range steps {
		out, err := ed.Apply(s.role, s.tool, s.args)
		got := out
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("step %d: %v does not wrap ErrRefused", i, err)
			}
			got = err.Error()
		}
		if s.want == "" {
			if err != nil || len(out) != 8 {
				t.Fatalf("step %d: add_entry gave %q, %v; want a new 8-digit id", i, out, err)
			}
			added = out
			continue
		}
		if !strings.HasPrefix(got, s.want) {
			t.Errorf("step %d (%s %s): got %q, want prefix %q", i, s.tool, s.args, got, s.want)
		}
	}
	pb, gone := ed.Finish()
	// e2 had harmful 3 after the tag → but it was deleted first; nothing left to prune.
	if len(gone) != 0 {
		t.Errorf("pruned %v", gone)
	}
	ids := []string{}
	for _, e := range pb.Entries {
		ids = append(ids, e.ID)
	}
	if !slices.Equal(ids, []string{"e1", "e3", added}) {
		t.Fatalf("entries %v", ids)
	}
	e1, _ := pb.Get("e1")
	e3, _ := pb.Get("e3")
	nu, _ := pb.Get(added)
	if e1.Helpful != 3 || e1.Version != 0 {
		t.Errorf("e1 %+v", e1)
	}
	if e3.Content != "Call get_reservation_details before any update." || e3.Version != 4 || !slices.Equal(e3.Sources, []string{"ep9"}) {
		t.Errorf("e3 %+v", e3)
	}
	if nu.Section != "rules" || nu.Version != 4 || nu.Content != "Basic economy cannot be changed." {
		t.Errorf("added %+v", nu)
	}
	if ed.Summary(Reflector) != "e2 misled run 1" || ed.Summary(Mutator) != "added the basic economy rule" {
		t.Errorf("summaries %q %q", ed.Summary(Reflector), ed.Summary(Mutator))
	}
	if ed.Applied() != 5 { // 2 tags, add, update, delete
		t.Errorf("applied %d", ed.Applied())
	}
	// The base is untouched.
	if len(base.Entries) != 3 || base.Entries[0].Helpful != 2 {
		t.Errorf("base changed: %+v", base.Entries)
	}
}

// The same calls on the same playbook give the same ids; a deleted id is never reused.
func TestEditorDeterministic(t *testing.T) {
	run := func() []string {
		ed := NewEditor(seed(), 2, nil, DefaultLimits())
		a, _ := ed.Apply(Mutator, ToolAdd, `{"content":"rule A"}`)
		_, _ = ed.Apply(Mutator, ToolDelete, `{"entry_id":"`+a+`"}`)
		b, _ := ed.Apply(Mutator, ToolAdd, `{"content":"rule A"}`)
		return []string{a, b}
	}
	x, y := run(), run()
	if !slices.Equal(x, y) {
		t.Errorf("ids differ between runs: %v %v", x, y)
	}
	if x[0] == x[1] {
		t.Errorf("a deleted id was reused: %v", x)
	}
}

func TestEnforce(t *testing.T) {
	mk := func(nets ...[2]int) *Playbook {
		p := &Playbook{}
		for i, n := range nets {
			p.Entries = append(p.Entries, Entry{ID: string(rune('a' + i)), Content: "c" + string(rune('a'+i)), Helpful: n[0], Harmful: n[1]})
		}
		return p
	}
	ids := func(p *Playbook) string {
		var s []string
		for _, e := range p.Entries {
			s = append(s, e.ID)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name   string
		p      *Playbook
		l      Limits
		kept   string
		remove string
	}{
		{"prune at the threshold", mk([2]int{0, 3}, [2]int{1, 3}, [2]int{0, 2}), Limits{Prune: 3}, "b,c", "a"},
		{"prune off", mk([2]int{0, 9}), Limits{}, "a", ""},
		{"budget evicts lowest net, oldest first", mk([2]int{1, 0}, [2]int{0, 0}, [2]int{0, 0}, [2]int{2, 0}, [2]int{0, 1}), Limits{MaxEntries: 3}, "a,c,d", "e,b"},
		{"prune then budget", mk([2]int{0, 5}, [2]int{0, 0}, [2]int{3, 0}), Limits{Prune: 3, MaxEntries: 1}, "c", "a,b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := Enforce(tc.p, tc.l)
			if got := ids(tc.p); got != tc.kept {
				t.Errorf("kept %s, want %s", got, tc.kept)
			}
			if got := strings.Join(gone, ","); got != tc.remove {
				t.Errorf("removed %s, want %s", got, tc.remove)
			}
		})
	}
}

func TestToolsSchemas(t *testing.T) {
	names := func(ts []Tool) []string {
		var n []string
		for _, x := range ts {
			n = append(n, x.Name)
			if x.Schema["type"] != "object" || x.Description == "" {
				t.Errorf("%s: schema %v", x.Name, x.Schema)
			}
		}
		return n
	}
	if got := names(Tools(Reflector)); !slices.Equal(got, []string{"tag_entry", "finish"}) {
		t.Errorf("reflector tools %v", got)
	}
	if got := names(Tools(Mutator)); !slices.Equal(got, []string{"add_entry", "update_entry", "delete_entry", "finish"}) {
		t.Errorf("mutator tools %v", got)
	}
	// Each schema's properties are exactly the arguments Apply accepts.
	for _, role := range []Role{Reflector, Mutator} {
		for _, tool := range Tools(role) {
			props := tool.Schema["properties"].(map[string]any)
			for k := range schema[tool.Name] {
				if _, ok := props[k]; !ok {
					t.Errorf("%s: Apply takes %q, the schema does not list it", tool.Name, k)
				}
			}
			for k := range props {
				if _, ok := schema[tool.Name][k]; !ok {
					t.Errorf("%s: the schema lists %q, Apply refuses it", tool.Name, k)
				}
			}
		}
	}
}
