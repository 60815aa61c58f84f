package jsontext

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// validPiecewise validates b as a decoder that reads it piecewise does: the
// containers down to depth split (ValidMembers, ValidElements), each value below
// them whole (ValidValue), UTF-8 once. It must judge every body as Validate does.
func validPiecewise(b []byte, split int) bool {
	if !utf8.Valid(b) {
		return false
	}
	js := string(b)
	var value func(i, depth int) int
	value = func(i, depth int) int {
		if depth >= split || depth >= MaxDepth || i >= len(b) { // a walker splits no deeper than MaxDepth
			return ValidValue(b, i, depth)
		}
		switch b[i] {
		case '{':
			return ValidMembers(b, js, i, func(_ string, v int) int { return value(v, depth+1) })
		case '[':
			return ValidElements(b, i, func(v int) int { return value(v, depth+1) })
		}
		return ValidValue(b, i, depth)
	}
	end := value(SkipWS(b, 0), 0)
	return end >= 0 && SkipWS(b, end) == len(b)
}

func checkPiecewise(t *testing.T, b []byte) {
	t.Helper()
	want := Validate(b) == nil
	for _, split := range []int{0, 1, 2, 3, 64, MaxDepth} {
		if got := validPiecewise(b, split); got != want {
			t.Fatalf("piecewise (split at depth %d) %.300q (%d bytes) = %v, Validate says %v", split, b, len(b), got, want)
		}
	}
}

// TestValidPiecewiseMatchesValidate: the seeds and their mutations, split at every
// depth, are judged as Validate judges them whole.
func TestValidPiecewiseMatchesValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range scanSeeds {
		checkPiecewise(t, []byte(s))
		mutate(rng, s, 300, func(b []byte) { checkPiecewise(t, b) })
	}
}

// TestValidPiecewiseDepth: MaxDepth counts from the document's root, whichever
// container the walk leaves to ValidValue, and whatever the containers' kinds.
func TestValidPiecewiseDepth(t *testing.T) {
	nest := func(levels int, open, closing string) []byte { // levels of open…closing around 0
		return []byte(strings.Repeat(open, levels) + "0" + strings.Repeat(closing, levels))
	}
	for _, n := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		checkPiecewise(t, nest(n, "[", "]"))
		checkPiecewise(t, nest(n, `{"a":`, "}"))
		checkPiecewise(t, nest(n/2, `[{"a":`, "}]"))
		checkPiecewise(t, nest(n/2, `{"a":[`, "]}"))
	}
	if ValidValue([]byte("[]"), 0, MaxDepth+1) != -1 || ValidValue([]byte("[]"), 0, MaxDepth) != -1 ||
		ValidValue([]byte("[]"), 0, MaxDepth-1) != 2 || ValidValue([]byte("0"), 0, MaxDepth) != 1 {
		t.Fatal("ValidValue's depth bound")
	}
}

// FuzzValidPiecewise: any bytes are judged piecewise as Validate judges them whole.
func FuzzValidPiecewise(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPiecewise(t, b) })
}
