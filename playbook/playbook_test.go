package playbook

import (
	"bytes"
	"cmp"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A playbook RCL saved round-trips byte for byte: every field kept, in to_dict's order.
func TestRCLRoundTrip(t *testing.T) {
	in := read(t, "rcl_saved.json")
	p, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{ID: "3f2a9c1b", Section: "strategies_and_hard_rules", Content: "Before calling an API, read its documentation with show_api_doc.", Helpful: 4, Harmful: 1},
		{ID: "a1b2c3d4", Section: "apis_to_use_for_specific_information", Content: "Paginate: keep calling with page_index + 1 until an empty page.", Helpful: 0, Harmful: 3},
		{ID: "0c9d8e7f", Section: "verification_checklist", Content: "Verify the final answer against the task statement before complete_task.", Helpful: 7},
		{ID: "5e6f7a8b", Section: "others", Content: "Use the phone app's contacts to resolve a person's email.", Helpful: 1},
	}
	if len(p.Entries) != len(want) {
		t.Fatalf("entries: got %d, want %d", len(p.Entries), len(want))
	}
	for i, w := range want {
		g := p.Entries[i]
		if g.ID != w.ID || g.Section != w.Section || g.Content != w.Content || g.Helpful != w.Helpful || g.Harmful != w.Harmful {
			t.Errorf("entry %d: got %+v, want %+v", i, g, w)
		}
	}
	if out := p.JSON(); !bytes.Equal(bytes.TrimSpace(out), bytes.TrimSpace(in)) {
		t.Errorf("written back differently:\n%s\nwant:\n%s", out, in)
	}
}

// Unknown keys of the file and of entries survive, and so does camproxy's provenance.
func TestUnknownKeysAndProvenanceKept(t *testing.T) {
	in := `{"entries":[{"content":"a rule","section":"s","entry_id":"e1","helpful_count":2,"harmful_count":0,
	"camproxy":{"version":3,"sources":["ep1","ep2"]},"rationale":"seen twice","source_tasks":[1,2]}],
	"version":"1.0","meta":{"benchmark":"appworld"}}`
	p, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	e := p.Entries[0]
	if e.Version != 3 || !slices.Equal(e.Sources, []string{"ep1", "ep2"}) {
		t.Fatalf("provenance: %+v", e)
	}
	again, err := Parse(p.JSON())
	if err != nil {
		t.Fatalf("%v\n%s", err, p.JSON())
	}
	var a, b any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(again.JSON(), &b)
	if ja, jb := mustJSON(a), mustJSON(b); !bytes.Equal(ja, jb) {
		t.Errorf("keys lost:\n%s\nwant\n%s", jb, ja)
	}
}

// RCL's seed playbooks carry only content and section; section defaults to "others";
// the ids made for them are RCL-shaped and the same on every load.
func TestRCLSeedLoads(t *testing.T) {
	in := read(t, "rcl_seed.json")
	p, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 3 || p.Entries[2].Section != "others" || p.Entries[1].Section != "common_mistakes_and_correct_strategies" {
		t.Fatalf("got %+v", p.Entries)
	}
	q, _ := Parse(in)
	hex8 := regexp.MustCompile(`^[0-9a-f]{8}$`)
	for i, e := range p.Entries {
		if !hex8.MatchString(e.ID) || e.ID != q.Entries[i].ID {
			t.Errorf("entry %d id %q (next load %q): want the same 8 hex digits", i, e.ID, q.Entries[i].ID)
		}
		if e.Helpful != 0 || e.Harmful != 0 {
			t.Errorf("entry %d counts %d/%d", i, e.Helpful, e.Harmful)
		}
	}
	// What is written is what RCL's from_dict reads: every key present.
	var doc struct {
		Version string           `json:"version"`
		Entries []map[string]any `json:"entries"`
	}
	if err := json.Unmarshal(p.JSON(), &doc); err != nil || doc.Version != "1.0" {
		t.Fatalf("%v %q", err, doc.Version)
	}
	for _, e := range doc.Entries {
		for _, k := range []string{"content", "section", "entry_id", "helpful_count", "harmful_count"} {
			if _, ok := e[k]; !ok {
				t.Errorf("written entry lacks %q: %v", k, e)
			}
		}
	}
}

// top_n ranks by helpful_count − harmful_count: the entry RCL counted harmful 3 times
// is the one left out.
func TestContextTopNRanksByRCLCounts(t *testing.T) {
	p, err := Parse(read(t, "rcl_saved.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := p.Context(3)
	if strings.Contains(ctx, "Paginate") {
		t.Errorf("top 3 kept the entry with net −3:\n%s", ctx)
	}
	for _, want := range []string{"show_api_doc", "Verify the final answer", "phone app"} {
		if !strings.Contains(ctx, want) {
			t.Errorf("top 3 lost %q:\n%s", want, ctx)
		}
	}
	if got := p.Context(1); !strings.Contains(got, "Verify the final answer") || strings.Count(got, "\n- ") != 1 {
		t.Errorf("top 1:\n%s", got)
	}
	full := p.Context(0)
	want := "## strategies_and_hard_rules\n- Before calling an API, read its documentation with show_api_doc.\n\n" +
		"## apis_to_use_for_specific_information\n- Paginate: keep calling with page_index + 1 until an empty page.\n\n" +
		"## verification_checklist\n- Verify the final answer against the task statement before complete_task.\n\n" +
		"## others\n- Use the phone app's contacts to resolve a person's email."
	if full != want {
		t.Errorf("context:\n%s\nwant\n%s", full, want)
	}
}

func TestACERoundTrip(t *testing.T) {
	p, err := Parse(read(t, "ace.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 3 || p.Entries[0].ID != "str-00001" || p.Entries[0].Helpful != 5 || p.Entries[1].Harmful != 2 ||
		p.Entries[2].Section != "COMMON MISTAKES TO AVOID" {
		t.Fatalf("got %+v", p.Entries)
	}
	q, err := ParseACE([]byte(p.ACE()))
	if err != nil {
		t.Fatal(err)
	}
	if !sameEntries(p, q) {
		t.Errorf("ACE round trip:\n%s", p.ACE())
	}
	// And through RCL's JSON.
	r, err := Parse(p.JSON())
	if err != nil || !sameEntries(p, r) {
		t.Errorf("JSON round trip: %v", err)
	}
}

func TestParseACEForms(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Entry
		err      string
	}{
		{"appworld stored form without counters", "## STRATEGIES AND HARD RULES\n[shr-00001] Always check.\n## TROUBLESHOOTING AND PITFALLS:\n[tap-00002] Retry once.\n",
			[]Entry{{ID: "shr-00001", Section: "STRATEGIES AND HARD RULES", Content: "Always check."}, {ID: "tap-00002", Section: "TROUBLESHOOTING AND PITFALLS", Content: "Retry once."}}, ""},
		{"dashed bullets and continuation", "# Title\n- first\n  continues\n- [x] helpful=1 :: second\n",
			[]Entry{{Section: "", Content: "first\ncontinues"}, {ID: "x", Section: "", Content: "second", Helpful: 1}}, ""},
		{"bad counter", "[a] helpful=x :: c\n", nil, "line 1"},
		{"stray text", "just text\n", nil, "expected a"},
		{"same id twice", "[a] :: one\n[a] :: two\n", nil, "used twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseACE([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Entries) != len(tc.want) {
				t.Fatalf("got %+v", p.Entries)
			}
			for i, w := range tc.want {
				g := p.Entries[i]
				if w.ID != "" && g.ID != w.ID || g.Section != w.Section || g.Content != w.Content || g.Helpful != w.Helpful {
					t.Errorf("%d: got %+v want %+v", i, g, w)
				}
			}
		})
	}
}

func TestParseJSONErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"version":"1.0"}`:                                                           `needs "entries"`,
		`{"entries":[{"section":"s"}]}`:                                               `"content" is required`,
		`{"entries":[{"content":"c","helpful_count":1.5}]}`:                           "whole number",
		`{"entries":[{"content":"c","helpful_count":"2"}]}`:                           "must be a number",
		`{"entries":[{"content":"a","entry_id":"x"},{"content":"b","entry_id":"x"}]}`: "used twice",
		"{\n\"entries\": [,]}":                                                        "line 2",
		`{"entries":{}}`:                                                              "array",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", in, err, want)
		}
	}
}

func TestLines(t *testing.T) {
	p, _ := Parse(read(t, "rcl_saved.json"))
	lines := strings.Split(strings.TrimSpace(p.Lines()), "\n")
	if len(lines) != 4 || lines[1] != "[a1b2c3d4] (apis_to_use_for_specific_information) Paginate: keep calling with page_index + 1 until an empty page." {
		t.Errorf("lines:\n%s", p.Lines())
	}
	if (&Playbook{}).Lines() != "(the playbook is empty)" {
		t.Error("empty playbook")
	}
}

func sameEntries(a, b *Playbook) bool {
	if len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if x.ID != y.ID || cmp.Or(x.Section, DefaultSection) != cmp.Or(y.Section, DefaultSection) || x.Content != y.Content || x.Helpful != y.Helpful || x.Harmful != y.Harmful {
			return false
		}
	}
	return true
}

// FuzzParse: no input panics; what parses writes back to JSON that parses to the same
// entries, and to ACE text that does too when no content breaks the bullet form.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"rcl_saved.json", "rcl_seed.json", "ace.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"entries":[{"content":"x","entry_id":7}],"version":1}`))
	f.Add([]byte("- a\n## s\n[b] helpful=2 :: c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		q, err := ParseJSON(p.JSON())
		if err != nil {
			t.Fatalf("written JSON does not parse: %v\n%s", err, p.JSON())
		}
		if !sameEntries(p, q) {
			t.Fatalf("JSON round trip changed entries:\n%+v\n%+v", p.Entries, q.Entries)
		}
		_ = p.Context(2)
		_ = p.Lines()
		_ = p.ACE()
	})
}
