// Package memotest checks that an adapter reads a body from its memo exactly as it
// reads it afresh.
package memotest

import (
	"reflect"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// Same fails unless parse (through the adapter's memo) and fresh (with a memo that
// remembers nothing) read body alike: the same error or the same request, every
// unexported field included, slots aside (a fresh reading has slots of its own).
func Same[R protocol.Request](t testing.TB, body []byte, parse, fresh func([]byte) (R, error)) {
	t.Helper()
	got, gerr := parse(body)
	want, werr := fresh(body)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%.120s: error %v, fresh %v", body, gerr, werr)
	}
	if gerr != nil {
		return
	}
	g, w := got.Parsed(), want.Parsed()
	if len(g.Slots) != len(g.Messages) {
		t.Fatalf("%d slots for %d messages", len(g.Slots), len(g.Messages))
	}
	g.Slots, w.Slots = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%.120s:\nmemo  %+v\nfresh %+v", body, got, want)
	}
}
