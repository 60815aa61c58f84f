package episode

import (
	"encoding/binary"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/camproxy/camproxy/protocol"
)

// The digest of an answer is computed when the answer comes back from the upstream
// (Digest, for the episode's tip) and again when the agent sends it back in its next
// call: there it is an element the adapter's memo has not seen, whose slot is empty,
// so Chains would canonicalise it a second time. answerMemo carries the first digest
// over to the second, looked up by a hash of the fields the digest reads, as sent:
// hashing them is a tenth of canonicalising them. Two messages of one such hash get
// one digest: a collision of this 64-bit hash costs what a collision of the digests
// (and of the chain hashes built from them) does, which stitching accepts already.
// Each answer comes back once: a hit is forgotten, and a shard that fills up is
// emptied (answers no call sent back: the episode's last, a stream cut short).
const (
	answerShards = 16
	answerSlots  = 256 // per shard
)

type answerMemo struct {
	shards [answerShards]struct {
		mu sync.Mutex
		m  map[uint64]uint64 // answerKey → digest
	}
}

// answers is the process's answer memo: a few hundred kilobytes at most. Like a
// sync.Pool it holds only what a pure function derives from its argument.
var answers answerMemo

func (a *answerMemo) put(key, dg uint64) {
	sh := &a.shards[key%answerShards]
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= answerSlots {
		sh.m = make(map[uint64]uint64, answerSlots)
	}
	sh.m[key] = dg
	sh.mu.Unlock()
}

// take returns and forgets the digest remembered under key.
func (a *answerMemo) take(key uint64) (uint64, bool) {
	sh := &a.shards[key%answerShards]
	sh.mu.Lock()
	dg, ok := sh.m[key]
	if ok {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
	return dg, ok
}

// answerKey hashes what writeCanonical reads of m (role, content, tool calls' ids,
// names and arguments, tool-call id), each with its length, so that no two
// different messages spell one stream of bytes.
func answerKey(d *xxhash.Digest, m *protocol.Message) uint64 {
	d.Reset()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		_, _ = d.Write(n[:])
		_, _ = d.WriteString(s)
	}
	field("answer")
	field(m.Role)
	field(m.Content)
	field(m.ToolCallID)
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		field(tc.ID)
		field(tc.Name)
		field(tc.Arguments)
	}
	return d.Sum64()
}
