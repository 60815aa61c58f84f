package proxy

import (
	"strings"
	"testing"
)

// TestRenders: a template rendered with a context is the text strings.ReplaceAll
// makes, whatever the slots held before (another context of the same slot, the same
// context with another template, a text too long to remember), and a text rendered
// before costs no allocation.
func TestRenders(t *testing.T) {
	var rs renders
	a := "Guidance for: book the flight, " + strings.Repeat("x", 40) + ", then confirm."
	b := []byte(a)
	b[20] = 'B' // a's length and first, middle and last words: a's slot
	long := strings.Repeat("y", maxRendered)
	cases := []struct{ template, context string }{
		{"\n\n{{context}}", a}, {"\n\n{{context}}", string(b)}, {"\n\n{{context}}", a},
		{"Context:\n{{context}}\n({{context}})", a}, {"{{context}}", ""}, {"no placeholder", a},
		{"\n\n{{context}}", "short"}, {"\n\n{{context}}", long}, {"\n\n{{context}}", long},
	}
	if renderKey(cases[0].template, a) != renderKey(cases[1].template, string(b)) {
		t.Fatal("the colliding contexts do not share a slot: the test checks nothing")
	}
	for _, c := range cases {
		if got, want := rs.render(c.template, c.context), strings.ReplaceAll(c.template, "{{context}}", c.context); got != want {
			t.Errorf("render(%q, %.20q) = %.40q, want %.40q", c.template, c.context, got, want)
		}
	}
	tmpl, ctx := "\n\n{{context}}", strings.Clone(a)
	rs.render(tmpl, ctx)
	if n := testing.AllocsPerRun(100, func() { rs.render(tmpl, ctx) }); n != 0 {
		t.Errorf("a text rendered before cost %v allocations, want 0", n)
	}
}
