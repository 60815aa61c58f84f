// Package splicetest holds the checks every protocol adapter's splice tests share:
// a splice is one run of bytes inserted at the placement's anchor, nothing else.
package splicetest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// CheckInsertion fails unless out is in plus one run of bytes inserted at offset at
// (ok: the adapter has an anchor for p), and stays valid JSON when in was.
func CheckInsertion(t testing.TB, at int, ok bool, in, out []byte, p protocol.Placement) {
	t.Helper()
	n := len(out) - len(in)
	if n == 0 {
		if !bytes.Equal(in, out) {
			t.Fatalf("%s: same length, other bytes:\n%s\n%s", p, in, out)
		}
		return
	}
	if !ok || n < 0 {
		t.Fatalf("%s: %d bytes inserted without an anchor", p, n)
	}
	restored := append(append([]byte{}, out[:at]...), out[at+n:]...)
	if !bytes.Equal(restored, in) {
		t.Fatalf("%s: deleting the inserted bytes %q does not restore the input:\n%s\n%s", p, out[at:at+n], in, restored)
	}
	if json.Valid(in) && !json.Valid(out) {
		t.Fatalf("%s: output is not valid JSON:\n%s", p, out)
	}
}

// ContainsMessage reports whether any message's content holds s.
func ContainsMessage(msgs []protocol.Message, s string) bool {
	for _, m := range msgs {
		if strings.Contains(m.Content, s) {
			return true
		}
	}
	return false
}
