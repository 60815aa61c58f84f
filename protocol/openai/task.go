package openai

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// findTask applies rules in order (protocol.FindTask) to the texts of the messages
// array's elements els; the first that matches sets r.Task and r.task. The anchor is
// the end of the task in the text it was found in. segs and ps are room for the
// texts and the rules' segments, returned for reuse. A task found before in the same
// leading elements by the same rules is taken as found then (recallTask); one newly
// found is remembered for the next call (rememberTask) where remembered says that the
// memo holds its element and those before it.
func (r *Request) findTask(rules []protocol.TaskRule, body []byte, els []protocol.Placed[*element], remembered func(int) bool,
	segs []segment, ps []protocol.Segment) ([]segment, []protocol.Segment) {
	if r.recallTask(rules, els) {
		return segs, ps
	}
	segs = appendSegments(segs, els)
	var prefix bool
	if ps, prefix = r.findIn(rules, body, segs, ps); prefix {
		r.rememberTask(rules, els, remembered)
	}
	return segs, ps
}

// findIn applies rules in order to the texts segs (protocol.FindTask); the first that
// matches sets r.Task and r.task. It returns ps, room for the rules' segments, and
// whether the task found depends on no text after its own message (Found.Prefix).
func (r *Request) findIn(rules []protocol.TaskRule, body []byte, segs []segment, ps []protocol.Segment) ([]protocol.Segment, bool) {
	ps = slices.Grow(ps[:0], len(segs))[:len(segs)]
	turn, counted := 0, 0 // assistant messages in r.Messages[:counted]
	for k, s := range segs {
		for ; counted < s.msg; counted++ {
			if r.Messages[counted].Role == "assistant" {
				turn++
			}
		}
		ps[k] = protocol.Segment{Msg: s.msg, Role: r.Messages[s.msg].Role, Text: s.text, Turn: turn, Offset: s.idx}
	}
	f, ok := protocol.FindTask(rules, body, ps)
	if !ok {
		return ps, false
	}
	s := &segs[f.Seg]
	r.Task, r.TaskRule = f.Task, f.Rule
	r.task = taskSpot{msg: s.msg, part: s.part, at: s.idx + jsontext.QuotedOffset(s.raw, f.End), msgEnd: s.msgEnd}
	return ps, f.Prefix
}

// appendSegments appends the texts task rules may match of the elements els, in order,
// to segs and returns them.
func appendSegments(segs []segment, els []protocol.Placed[*element]) []segment {
	n := 0
	for _, p := range els {
		n += len(p.V.texts)
	}
	segs = slices.Grow(segs, n) // one allocation at most, not one per doubling
	for k, p := range els {
		for _, t := range p.V.texts {
			t.msg, t.idx, t.msgEnd = k, p.At+t.idx, p.End
			segs = append(segs, t)
		}
	}
	return segs
}

// An agent resends its history on every call, and its first messages, where task
// rules find the task, stay as they were: each element (remembered by the memo) holds
// the tasks found in it with the elements before it (taskMemo), so that a call that
// sends the same leading elements takes its task from there rather than reading the
// texts of every message again (findTask ran on every call). Only a task that depends
// on no text after its own message (protocol.Found.Prefix) is remembered, and only in
// the first taskElements elements.

// taskElements is how many leading elements remember tasks: the task is found in the
// first user message, after a system prompt or a few messages of setup.
const taskElements = 4

// taskWays is how many tasks an element remembers, one per run of elements before it:
// a first user message that sessions share, each after a system prompt of its own.
const taskWays = 4

// taskMemo is a task found in an element after the elements before: the rules that
// found it and what it set.
type taskMemo struct {
	rules []protocol.TaskRule // compared by identity (sameRules)
	// before are the ids of the elements before (element.id): a task remembered keeps
	// no element alive that the memo let go (its bound holds), and telling them costs
	// no load of theirs but the id, next to the message a call copies anyway.
	before     [taskElements - 1]uint64
	n          int // the elements before: before[:n]
	task, rule string
	part       int // as taskSpot's
	at         int // taskSpot.at, from the element's first byte
}

// elementTasks is an element's remembered tasks, a ring written at next. keys[w] is
// the id of the element right before ways[w]'s (0: none), so that only the task after
// the same element is loaded, each a cache miss at saturation. A key and its task are
// written one after the other: one read in between is told apart by the task's own
// check, and costs a miss.
type elementTasks struct {
	keys [taskWays]atomic.Uint64
	ways [taskWays]atomic.Pointer[taskMemo]
	next atomic.Uint32
}

// taskKey is the key of a task found in els[k] (elementTasks.keys).
func taskKey(els []protocol.Placed[*element], k int) uint64 {
	if k == 0 {
		return 0
	}
	return els[k-1].V.id
}

// recallTask sets the task found before in the same leading elements of els by the
// same rules, if any, and reports whether it did.
func (r *Request) recallTask(rules []protocol.TaskRule, els []protocol.Placed[*element]) bool {
	for k := range min(len(els), taskElements) {
		p := &els[k]
		t := p.V.tasks.Load()
		if t == nil {
			continue
		}
		key := taskKey(els, k)
		for w := range t.ways {
			if t.keys[w].Load() != key {
				continue
			}
			m := t.ways[w].Load()
			if m == nil || !sameRules(m.rules, rules) || !m.after(els[:k]) {
				continue
			}
			r.Task, r.TaskRule = m.task, m.rule
			r.task = taskSpot{msg: k, part: m.part, at: p.At + m.at, msgEnd: p.End}
			return true
		}
	}
	return false
}

// after reports whether m was found after the elements before.
func (m *taskMemo) after(before []protocol.Placed[*element]) bool {
	if m.n != len(before) {
		return false
	}
	for i, p := range before {
		if p.V.id != m.before[i] {
			return false
		}
	}
	return true
}

// rememberTask remembers the task r found by rules (one that depends on no later text)
// on its element, with the elements before it, when the memo holds them all: an
// element read for this call alone is never sent again.
func (r *Request) rememberTask(rules []protocol.TaskRule, els []protocol.Placed[*element], remembered func(int) bool) {
	k := r.task.msg
	if k >= taskElements || len(rules) == 0 {
		return
	}
	for i := range k + 1 {
		if !remembered(i) {
			return
		}
	}
	// A task the rules built (parts joined, an envelope cut out) is a copy that the
	// memo's bound does not count, up to taskWays of them per element: only a task that
	// is a slice of the element's own text, which the memo accounts for, is kept.
	if !sliceOfTexts(r.Task, els[k].V.texts) {
		return
	}
	m := &taskMemo{rules: rules, n: k, task: r.Task, rule: r.TaskRule, part: r.task.part, at: r.task.at - els[k].At}
	for i := range k {
		m.before[i] = els[i].V.id
	}
	e := els[k].V
	t := e.tasks.Load()
	if t == nil { // made once, for the few elements a task is found in
		e.tasks.CompareAndSwap(nil, new(elementTasks))
		t = e.tasks.Load()
	}
	w := (t.next.Add(1) - 1) % taskWays
	t.keys[w].Store(taskKey(els, k))
	t.ways[w].Store(m)
}

// sliceOfTexts reports whether s is empty or lies within the decoded text of one of
// texts (shares its memory).
func sliceOfTexts(s string, texts []segment) bool {
	if s == "" {
		return true
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	for _, t := range texts {
		if t.text == "" {
			continue
		}
		b := uintptr(unsafe.Pointer(unsafe.StringData(t.text)))
		if p >= b && p+uintptr(len(s)) <= b+uintptr(len(t.text)) {
			return true
		}
	}
	return false
}

// sameRules says whether a and b are the same compiled rules (one slice).
func sameRules(a, b []protocol.TaskRule) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
