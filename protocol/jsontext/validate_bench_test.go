package jsontext

import (
	"os"
	"testing"
)

// BenchmarkValidate validates a whole request body (a 16 KB airline call) with no
// memo: the validator's own speed, which the piecewise one shares.
func BenchmarkValidate(b *testing.B) {
	body, err := os.ReadFile("../openai/testdata/airline16k.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Validate(body); err != nil {
			b.Fatal(err)
		}
	}
}
