package protocol

import "testing"

func TestByPlacement(t *testing.T) {
	tests := []struct {
		p       Placement
		hasTask bool
		want    string
		ok      bool
	}{
		{System, true, "sys", true},
		{System, false, "sys", true}, // a system prompt needs no task
		{AppendToTask, true, "task", true},
		{AppendToTask, false, "task", false},
		{NewMessage, true, "new", true},
		{NewMessage, false, "new", false},
		{"elsewhere", true, "", false},
	}
	for _, tt := range tests {
		got, ok := ByPlacement(tt.p, tt.hasTask, "sys", "task", "new")
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("ByPlacement(%s, %v) = %q, %v; want %q, %v", tt.p, tt.hasTask, got, ok, tt.want, tt.ok)
		}
	}
}
