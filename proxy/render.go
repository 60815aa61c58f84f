package proxy

import (
	"strings"
	"sync/atomic"
	"unsafe"
)

// renders remembers the text of a placement's template rendered with an episode's
// context. Both are fixed for an episode, and its context is spliced again on every
// call it makes: rendered once, not once per call. Bounded: renderSlots texts of at
// most maxRendered bytes, one per slot, a newer one in the slot of an older; a text
// found in a slot is one rendered from the same template and context (compared whole:
// at no cost for the same strings, which compare by their pointers first).
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
	text := renderText(template, context)
	if len(text) <= maxRendered {
		slot.Store(&rendered{template: template, context: context, text: text})
	}
	return text
}

// renderText is template with every {{context}} replaced by context.
func renderText(template, context string) string {
	return strings.ReplaceAll(template, "{{context}}", context)
}

// renderKey picks a slot by where the context's and the template's bytes are, not by
// reading them: at saturation each line read is a cache miss, dearer than rendering
// a short context. An episode store in this process gives every call of an episode
// the same context string (localEpisodes); another string of the same bytes is found
// only in the same slot, and otherwise costs a render.
func renderKey(template, context string) uint64 {
	k := uint64(uintptr(unsafe.Pointer(unsafe.StringData(context))))>>4 ^ uint64(len(context))*0x9e3779b97f4a7c15 ^
		uint64(uintptr(unsafe.Pointer(unsafe.StringData(template))))*31
	return k ^ k>>29 ^ k>>47
}
