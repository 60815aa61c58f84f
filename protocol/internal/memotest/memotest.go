// Package memotest checks that an adapter reads a body from its memo exactly as it
// reads it afresh.
package memotest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// Same fails unless parse (through the adapter's memo) and fresh (with a memo that
// remembers nothing) read body alike: the same error or the same request, every
// unexported field included, slots aside (a fresh reading has slots of its own);
// an invalid body fails with the same error.
func Same[R protocol.Request](t testing.TB, body []byte, parse, fresh func([]byte) (R, error)) {
	t.Helper()
	got, gerr := parse(body)
	want, werr := fresh(body)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%.120s: error %v, fresh %v", body, gerr, werr)
	}
	if gerr != nil {
		return
	}
	g, w := got.Parsed(), want.Parsed()
	if g.Slots != nil && len(g.Slots) != len(g.Messages) {
		t.Fatalf("%d slots for %d messages", len(g.Slots), len(g.Messages))
	}
	g.Slots, w.Slots = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%.120s:\nmemo  %+v\nfresh %+v", body, got, want)
	}
}

// Fresh is parse with *memo swapped, for the call, for one that remembers nothing:
// the reading Same compares with. (Tests of one package run one at a time.)
func Fresh[V any, R any](memo **protocol.Memo[V], parse func([]byte) (R, error)) func([]byte) (R, error) {
	return func(b []byte) (R, error) {
		saved := *memo
		*memo = protocol.NewMemo[V](0)
		defer func() { *memo = saved }()
		return parse(b)
	}
}

// Primed is Same for body after prime was parsed twice: the memo holds prime's
// elements (and their links) where body may hold the same bytes as another element,
// or inside a body that is not valid.
func Primed[R protocol.Request](t testing.TB, prime, body []byte, parse, fresh func([]byte) (R, error)) {
	t.Helper()
	for range 2 {
		_, _ = parse(prime)
	}
	Same(t, body, parse, fresh)
}

// SkipPairs are pairs of bodies for Primed: the first leaves its elements in the
// memo, the second holds their bytes where they are not the same element, or in a
// body that is not valid around them. key names the array ("messages", "input");
// el and other are two of its elements, el long enough (64 bytes) to be indexed by
// its first bytes.
func SkipPairs(key, el, other string) [][2]string {
	arr := func(els string) string { return `{"` + key + `":[` + els + `]}` }
	long := `"` + strings.Repeat("a", 72) + `"`
	num := strings.Repeat("1234567890", 7)
	return [][2]string{
		// A remembered number is the prefix of a longer one; a string of a longer one.
		{arr(num), arr(num + "1")},
		{arr(long), arr(long[:len(long)-1] + `\"]"`)},
		// A remembered element inside a string, followed by what ends an element.
		{arr(el), arr(strconv.Quote(el) + "," + el)},
		// Remembered elements in a body that is not valid around them.
		{arr(el), arr(el)[:len(arr(el))-1]},
		{arr(el), arr(el + "x")},
		{arr(el), arr(el + ",")},
		{arr(el), arr(el + "," + el + ",,")},
		{arr(el), `{"model":"` + "\xff" + `",` + arr(el)[1:]},
		{arr(el), `[` + el + `]`},
		{arr(el), `{"m":` + arr(el) + `}`},
		{arr(el), `{"` + key + `":[` + el + `],"` + key + `":{}}`},
		{arr(el), `{"` + key + `":[` + el + `],"` + key + `":[` + other + `]}`},
		// Another order, a repeat, whitespace around them.
		{arr(el + "," + other), arr(" " + other + " , " + el + "," + el + "\n")},
		{arr(el + "," + other), `{"model":"m","tools":[` + el + `],` + arr(other + "," + el)[1:]},
	}
}
