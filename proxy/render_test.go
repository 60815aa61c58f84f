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
	// b: another context whose string lands in a's slot.
	var b string
	for i := 0; b == ""; i++ {
		c := []byte(a)
		c[20] = byte('A' + i%26)
		if s := string(c); s != a && renderKey("\n\n{{context}}", s)%renderSlots == renderKey("\n\n{{context}}", a)%renderSlots {
			b = s
		}
	}
	long := strings.Repeat("y", maxRendered)
	cases := []struct{ template, context string }{
		{"\n\n{{context}}", a}, {"\n\n{{context}}", b}, {"\n\n{{context}}", a}, {"\n\n{{context}}", strings.Clone(a)},
		{"Context:\n{{context}}\n({{context}})", a}, {"{{context}}", ""}, {"no placeholder", a},
		{"\n\n{{context}}", "short"}, {"\n\n{{context}}", long}, {"\n\n{{context}}", long},
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
