package main

import (
	"io"
	"testing"
)

// TestOverloadTargets: the overload row's targets read camproxy's admitted p99
// against the floor's plus the slack, its merged events against the floor's, and
// count a run with errors other than refusals as no refusal at all.
func TestOverloadTargets(t *testing.T) {
	row := func(cpErrors int) *OverloadResult {
		return &OverloadResult{Rate: 10000, Paths: []*OverloadPath{
			{Path: "direct", P99: 1000, Events: 100},
			{Path: "floor", AddedP99: 2000, Events: 100, Merged: 3},
			{Path: "camproxy", AddedP99: 2000 + overloadP99Slack + 1, Events: 50, Merged: 3, Refused: 40, Errors: cpErrors},
		}}
	}
	for _, tc := range []struct {
		name     string
		errors   int
		refusals string
	}{{"refusals only", 0, "PASS"}, {"other errors", 2, "MISS"}} {
		e := &env{o: &options{}, out: io.Discard, res: &Results{Overload: row(tc.errors)}}
		var got []Target
		e.overloadTargets(func(name, rule string, value float64, cmp string, bound float64, unit, detail string) {
			tg := Target{Name: name, Value: value, Bound: bound, Cmp: cmp}
			if cmp == "<=" {
				tg.Pass = value <= bound
			} else {
				tg.Pass = value >= bound
			}
			got = append(got, tg)
		})
		if len(got) != 3 {
			t.Fatalf("%s: %d targets", tc.name, len(got))
		}
		if p := got[0]; p.Pass || p.Bound != 2000+overloadP99Slack {
			t.Errorf("%s: p99 %+v, want a MISS against floor + slack", tc.name, p)
		}
		if m := got[1]; !m.Pass || m.Bound != 3 {
			t.Errorf("%s: merged %+v, want a PASS at the floor's 3", tc.name, m)
		}
		if r := got[2]; map[bool]string{true: "PASS", false: "MISS"}[r.Pass] != tc.refusals {
			t.Errorf("%s: refusals %+v, want %s", tc.name, r, tc.refusals)
		}
	}
}
