package suggest

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"token", "token", 0}, {"tokne", "token", 1}, {"", "abc", 3},
		{"listn", "listen", 1}, {"server", "servre", 1}, {"ca", "abc", 3}, {"kitten", "sitting", 3},
	} {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	known := []string{"arm", "listen", "admin_listen", "max_body_bytes", "format", "from"}
	for _, tt := range []struct{ in, want string }{
		{"listn", "listen"},
		{"maxBodyBytes", "max_body_bytes"}, // another spelling of the same name
		{"max-body-bytes", "max_body_bytes"},
		{"fromat", "format"}, // a swap of neighbours
		{"xyz", ""},          // nothing near
		{"f", ""},            // too short to guess from
	} {
		if got := Closest(tt.in, known); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCandidates(t *testing.T) {
	known := []string{"completion", "replay", "report", "dev", "format", "from"}
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"rep", []string{"replay", "report"}}, // what it starts wins over a nearer name (dev)
		{"fo", []string{"format"}},
		{"reprot", []string{"report"}}, // no name it starts: the closest
		{"r", nil},                     // one character starts too much, and is near nothing
		{"zzzz", nil},
	} {
		if got := Candidates(tt.in, known); !slices.Equal(got, tt.want) {
			t.Errorf("Candidates(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
