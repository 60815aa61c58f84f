package proxy

import (
	"encoding/binary"
	"strings"
	"sync/atomic"
	"unsafe"
)

// renders remembers the text of a placement's template rendered with an episode's
// context. Both are fixed for an episode, and its context is spliced again on every
// call it makes: rendered once, not once per call. Bounded: renderSlots texts of at
// most maxRendered bytes, one per slot, a newer one in the slot of an older; a text
// found in a slot is one rendered from the same template and context (compared whole).
type renders struct {
	slots [renderSlots]atomic.Pointer[rendered]
}

// rendered is one text of renders, never modified.
type rendered struct {
	template, context, text string
}

const (
	renderSlots = 256
	// maxRendered is the longest text remembered: a larger one is rendered each call,
	// so that the slots hold at most some megabytes.
	maxRendered = 16 << 10
)

// render returns template with every {{context}} replaced by context.
func (rs *renders) render(template, context string) string {
	slot := &rs.slots[renderKey(template, context)%renderSlots]
	if r := slot.Load(); r != nil && r.context == context && r.template == template {
		return r.text
	}
	text := strings.ReplaceAll(template, "{{context}}", context)
	if len(text) <= maxRendered {
		slot.Store(&rendered{template: template, context: context, text: text})
	}
	return text
}

// renderKey picks a context's slot by a few of its bytes and its length, in constant
// time: contexts that it does not tell apart share a slot, and cost a render each
// when they alternate.
func renderKey(template, context string) uint64 {
	k := uint64(len(context))*0x9e3779b97f4a7c15 ^ uint64(len(template))
	if n := len(context); n >= 8 {
		b := unsafe.Slice(unsafe.StringData(context), n)
		k ^= binary.LittleEndian.Uint64(b) ^ binary.LittleEndian.Uint64(b[n/2-4:])*31 ^ binary.LittleEndian.Uint64(b[n-8:])*131
	} else {
		for i := range n {
			k = k*131 + uint64(context[i])
		}
	}
	return k ^ k>>29 ^ k>>47
}
