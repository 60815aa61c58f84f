package jsontext

import (
	"os"
	"testing"
)

func BenchmarkSkipTau(b *testing.B) {
	raw, err := os.ReadFile("../../../shared/data/tau-bench/gpt-4o-airline.json")
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if SkipValue(raw, SkipWS(raw, 0)) < len(raw)-2 {
			b.Fatal("end")
		}
	}
}

// BenchmarkSkipTauString skips the same bytes as one JSON string: escape-heavy, as
// tool results that carry JSON are.
func BenchmarkSkipTauString(b *testing.B) {
	raw, err := os.ReadFile("../../../shared/data/tau-bench/gpt-4o-airline.json")
	if err != nil {
		b.Skip(err)
	}
	s := append(AppendEscaped([]byte{'"'}, string(raw)), '"')
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if SkipValue(s, 0) != len(s) {
			b.Fatal("end")
		}
	}
}
