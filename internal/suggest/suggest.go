// Package suggest finds what a mistyped name was probably meant to be: the "did you
// mean" of config keys, command-line flags and commands.
package suggest

import "strings"

// Closest returns the known name an unknown one was probably meant to be: the same
// name in another spelling (maxBodyBytes, max-body-bytes), else the nearest within a
// small edit distance (a third of its length, at least 1, at most 3), else "". Of
// two as near, the one that starts like it (frm: from, not arm).
func Closest(unknown string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	best, bestD, bestP := "", min(max(len(unknown)/3, 1), 3)+1, -1
	for _, k := range known {
		if norm(k) == norm(unknown) {
			return k
		}
		d, p := Distance(unknown, k), commonPrefix(unknown, k)
		if d < bestD || d == bestD && p > bestP {
			best, bestD, bestP = k, d, p
		}
	}
	return best
}

// Candidates are the known names an unknown one was probably meant to be: those it
// starts (at least two characters typed: rep → replay, report), else Closest's one,
// else none.
func Candidates(unknown string, known []string) []string {
	var starts []string
	for _, k := range known {
		if len(unknown) >= 2 && strings.HasPrefix(k, unknown) {
			starts = append(starts, k)
		}
	}
	if len(starts) > 0 {
		return starts
	}
	if near := Closest(unknown, known); near != "" {
		return []string{near}
	}
	return nil
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Distance is the optimal string alignment distance between a and b: the
// insertions, deletions, substitutions and swaps of two neighbours (tokne → token)
// that turn one into the other.
func Distance(a, b string) int {
	// Three rows of the table: two back for swaps.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
