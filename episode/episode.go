// Package episode owns episode identity: the state camproxy keeps per episode (arm,
// task, the exact context injected, turn count) and stitching, which finds the
// episode a header-less call continues from the hash chain of its messages.
package episode

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// Episode is what camproxy remembers about one run of an agent on one task.
type Episode struct {
	ID            string    `json:"id"`
	TaskID        string    `json:"task_id"`
	Task          string    `json:"task"`
	Experiment    string    `json:"experiment,omitempty"` // whose arms Arm is one of
	Arm           string    `json:"arm"`
	Context       string    `json:"context"`        // the exact text spliced on every turn ("" = none)
	ContextSource string    `json:"context_source"` // miss, hit, none, fail-open, skip: how turn 0 got it
	Protocol      string    `json:"protocol"`
	Model         string    `json:"model"`
	Turns         int       `json:"turns"`   // completed turns
	History       int       `json:"history"` // messages in the episode after the last answer
	StartedAt     time.Time `json:"started_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	Reward        *float64  `json:"reward,omitempty"` // the harness's latest verdict
	Success       *bool     `json:"success,omitempty"`
}

// ErrNotFound is returned by Store.Get for an unknown or expired episode.
var ErrNotFound = errors.New("episode not found")

// Store keeps episodes and stitching tips. Implementations: memory and Redis.
type Store interface {
	// Get returns the episode or ErrNotFound.
	Get(ctx context.Context, id string) (*Episode, error)
	// Create stores ep unless an episode with its id exists; it returns the stored one
	// and whether ep was the one stored, so concurrent first turns agree on one context.
	Create(ctx context.Context, ep *Episode) (*Episode, bool, error)
	// Update overwrites the episode and refreshes its idle timeout.
	Update(ctx context.Context, ep *Episode) error
	// SetTip records that episode id's history now hashes to tip.
	SetTip(ctx context.Context, tip uint64, id string) error
	// Advance is what a finished turn writes, in one call: Update(ep), then SetTip of
	// each of tips, in order, to ep.ID. Like those calls it is not one transaction: a
	// failed Update does not keep the tips from being set; the error reports any
	// failure.
	Advance(ctx context.Context, ep *Episode, tips ...uint64) error
	// Claim looks up the tips in order (longest prefix first) and returns the episode
	// of the first one found and its position in tips. Each SetTip is claimed once;
	// once all claims at a tip are taken, the latest episode there is returned again
	// (a retried turn continues its episode). ok is false when no tip is known.
	Claim(ctx context.Context, tips []uint64) (id string, pos int, ok bool, err error)
	// Release gives back a claim whose call failed, so the agent's retry (or the twin
	// run it was confused with) finds the episode at that tip again.
	Release(ctx context.Context, tip uint64, id string) error
	// Ping reports whether the store is usable (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// prefixedHex is prefix followed by b in lower-case hex, in one allocation.
func prefixedHex(prefix string, b []byte) string {
	var buf [32]byte
	out := hex.AppendEncode(append(buf[:0], prefix...), b)
	return string(out)
}

// NewID returns a random episode id ("ep_" + 24 hex digits).
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefixedHex("ep_", b[:])
}

// Chain returns h where h[i] is the hash of the canonical form of msgs[0..i]: the
// digest of each message's canonical form (writeCanonical), folded in order. A
// message's digest depends on it alone, so a message resent on every call is
// canonicalised once (Chains, protocol.Slot) and a conversation of n messages costs
// n folds of two words once its earlier messages are known.
func Chain(msgs []protocol.Message) []uint64 { return chain(0, msgs, nil, false) }

// LooseChain is Chain with the text of system and developer messages left out (only
// their role and place count): the chain under which a conversation resumed with
// another system prompt finds its episode. A call is stitched by Chain's tips first,
// and by LooseChain's only when none of those is known (see canonicalText).
func LooseChain(msgs []protocol.Message) []uint64 { return chain(0, msgs, nil, true) }

// Chains returns Chain(v.Messages) and, when they hold a system or developer message,
// LooseChain(v.Messages) (nil otherwise: it would be Chain). Each message's digest is
// remembered in its slot (v.Slots), so the messages a call resends, which the adapter
// read from the memo, are not canonicalised again.
//
// experiment, when not empty, is the experiment the call belongs to, and task, when
// not empty, the task it declares (X-CAM-Task-Id): each seeds both chains, so the tips
// of an experiment and of a declared task are their own. Two agents in two
// experiments whose calls open alike (the same system prompt and first message),
// like two runs of different tasks, never trade episodes. Without either the chains
// are Chain's and LooseChain's.
func Chains(v *protocol.View, experiment, task string) (strict, loose []uint64) {
	seed := chainSeed(experiment, task)
	n := len(v.Messages)
	if !HasSystem(v.Messages) {
		return chainInto(make([]uint64, n), seed, v.Messages, v.Slots, false), nil
	}
	// Both chains in one allocation, each capped at its length: appending to one
	// never writes into the other.
	both := make([]uint64, 2*n)
	strict = chainInto(both[:n:n], seed, v.Messages, v.Slots, false)
	loose = chainInto(both[n:], seed, v.Messages, v.Slots, true)
	return strict, loose
}

// chainSeed is the hash an experiment's or a declared task's chains start from (0,
// Chain's, without either). It is written into a digest, not concatenated: a call
// allocates nothing for it.
func chainSeed(experiment, task string) uint64 {
	if experiment == "" && task == "" {
		return 0
	}
	var d xxhash.Digest
	d.Reset()
	if experiment != "" {
		_, _ = d.WriteString("experiment\x00")
		_, _ = d.WriteString(experiment)
		_, _ = d.WriteString("\x00")
	}
	if task != "" {
		_, _ = d.WriteString("task\x00")
		_, _ = d.WriteString(task)
	}
	return d.Sum64()
}

// HasSystem reports whether msgs hold a system or developer message: without one,
// LooseChain is Chain.
func HasSystem(msgs []protocol.Message) bool {
	for i := range msgs {
		if isSystem(msgs[i].Role) {
			return true
		}
	}
	return false
}

// chain folds the digests of msgs; slots, when not nil, remember the strict digests.
// In the loose chain a system message's digest is its role's alone (cheap, never
// remembered); every other message's is the strict one.
func chain(h uint64, msgs []protocol.Message, slots []*protocol.Slot, loose bool) []uint64 {
	return chainInto(make([]uint64, len(msgs)), h, msgs, slots, loose)
}

// chainInto is chain written into out, of len(msgs).
func chainInto(out []uint64, h uint64, msgs []protocol.Message, slots []*protocol.Slot, loose bool) []uint64 {
	var d xxhash.Digest
	for i := range msgs {
		m := &msgs[i]
		var dg uint64
		switch {
		case loose && isSystem(m.Role):
			dg = digest(&d, m, true)
		case i < len(slots) && slots[i] != nil:
			var ok bool
			if dg, ok = slots[i].Load(); !ok {
				dg = digest(&d, m, false)
				slots[i].Store(dg)
			}
		default:
			dg = digest(&d, m, false)
		}
		h = link(h, dg)
		out[i] = h
	}
	return out
}

// Extend returns the chain hash of a history whose hash is prev followed by m (of
// Chain, or of LooseChain: an assistant answer extends both alike).
func Extend(prev uint64, m *protocol.Message) uint64 { return ExtendBy(prev, Digest(m)) }

// Digest is the hash of m's canonical form, which Extend links to a history: a
// caller extending several chains by one answer (the strict and the loose) hashes it
// once.
func Digest(m *protocol.Message) uint64 {
	var d xxhash.Digest
	return digest(&d, m, false)
}

// ExtendBy is Extend(prev, m) given m's Digest.
func ExtendBy(prev, digest uint64) uint64 { return link(prev, digest) }

// digest is the hash of m's canonical form.
func digest(d *xxhash.Digest, m *protocol.Message, loose bool) uint64 {
	d.Reset()
	writeCanonical(d, m, loose)
	return d.Sum64()
}

// link is the chain hash of a history whose hash is prev followed by a message whose
// digest is dg.
func link(prev, dg uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], prev)
	binary.LittleEndian.PutUint64(b[8:], dg)
	return xxhash.Sum64(b[:])
}

// writeCanonical writes role, text, tool calls and tool-call id with whitespace
// collapsed, so that an SDK re-serialising the history (spacing in arguments, content
// null vs "") does not break the chain. The text is canonicalText's.
func writeCanonical(d *xxhash.Digest, m *protocol.Message, loose bool) {
	_, _ = d.WriteString(m.Role)
	_, _ = d.Write([]byte{0})
	writeCollapsed(d, canonicalText(m, loose), false)
	_, _ = d.Write([]byte{0})
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		_, _ = d.WriteString(tc.ID)
		_, _ = d.Write([]byte{1})
		_, _ = d.WriteString(tc.Name)
		_, _ = d.Write([]byte{1})
		writeArguments(d, tc.Arguments)
		_, _ = d.Write([]byte{2})
	}
	_, _ = d.WriteString(m.ToolCallID)
}

// canonicalText is the part of a message's text that identifies the conversation:
//
//   - user messages: the text without the built-in envelopes (protocol/envelope.go:
//     Claude Code's <system-reminder> blocks, Codex's <environment_context> …) and
//     with its volatile parts (dates, absolute paths, ids: protocol.Stable) replaced;
//   - system and developer messages: the text with its volatile parts replaced, so
//     that a conversation resumed on another day or in another folder continues; in
//     the loose chain, nothing (only their role and place count): the harness
//     rebuilds its system prompt on every start, and Claude Code's --continue changes
//     a line of it that is not a date (the model's description);
//   - assistant and tool messages: the text as sent; they are what happened.
//
// The cost is ambiguity. Two conversations that differ only in volatile parts hash
// alike, and in the loose chain so do two whose system prompts differ entirely. A call
// with no assistant message still starts a new episode, each answer's tip is claimed
// once, and a loose tip is looked at only when no strict tip is known, so parallel
// runs stay apart as before; only a later turn whose run answered exactly like another
// run's, and whose own strict tip is gone, could continue the other run's episode.
//
// An answer whose recorded copy was cut (replay.max_answer_bytes) has no chain tip; it
// is found by its sketch (SketchTip): the history before it, the first
// protocol.SketchText bytes of its text, whitespace collapsed, and the ids and names
// of its tool calls. Runs call tools under different ids, so parallel runs stay apart;
// two runs at one history whose cut answers call no tool and begin with the same
// protocol.SketchText bytes sketch alike. Each tip is still claimed once, so they stay
// two episodes, but the next turn of one may continue the other's.
func canonicalText(m *protocol.Message, loose bool) string {
	switch {
	case isSystem(m.Role):
		if loose {
			return ""
		}
		return memo.stable(m.Content)
	case m.Role == "user":
		return memo.stable(protocol.StripEnvelopes(m.Content))
	}
	return m.Content
}

func isSystem(role string) bool { return role == "system" || role == "developer" }

// writeArguments hashes tool-call arguments as JSON values: SDKs re-serialise them
// (Bedrock and Anthropic clients send the input back as an object: keys reordered,
// "\u00fc" for "ü", 1 for 1.0), so the hash covers the decoded value with sorted keys.
// Text that is not JSON (as gjson.Valid judges it) is hashed as text.
func writeArguments(d *xxhash.Digest, args string) {
	if args != "" {
		b := unsafe.Slice(unsafe.StringData(args), len(args)) // read only
		if jsonArguments(b, args) {
			var buf [512]byte
			out, _ := canonicalJSON(buf[:0], b, args, jsontext.SkipWS(b, 0))
			_, _ = d.Write(out)
			return
		}
	}
	writeCollapsed(d, args, true)
}

// jsonArguments reports whether writeArguments hashes args (b: its bytes) as a JSON
// value. Past jsontext's depth bound gjson still judges, as it did before the walk
// replaced it: the same arguments keep the same digest.
func jsonArguments(b []byte, args string) bool {
	ok, deep := jsontext.Valid(b)
	return ok || deep && gjson.Valid(args)
}

// canonicalJSON appends the value at b[i] of the valid b (js: the same bytes as a
// string) in one canonical spelling — objects with sorted keys, strings by their
// decoded text, numbers by their float value — and returns the offset after it.
// Walked a word at a time (jsontext), as gjson would read it (the tests' reference).
func canonicalJSON(dst, b []byte, js string, i int) ([]byte, int) {
	switch b[i] {
	case '{':
		type kv struct {
			k string
			v int
		}
		var arr [8]kv // tool arguments have a few keys: no allocation for them
		kvs := arr[:0]
		end := jsontext.Members(b, js, i, func(k string, v int) int { kvs = append(kvs, kv{k, v}); return -1 })
		slices.SortStableFunc(kvs, func(x, y kv) int { return strings.Compare(x.k, y.k) })
		dst = append(dst, '{')
		for n, e := range kvs {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = appendQuote(dst, e.k)
			dst = append(dst, ':')
			dst, _ = canonicalJSON(dst, b, js, e.v)
		}
		return append(dst, '}'), end
	case '[':
		dst = append(dst, '[')
		first := true
		end := jsontext.Elements(b, i, func(v int) int {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			var end int
			dst, end = canonicalJSON(dst, b, js, v)
			return end
		})
		return append(dst, ']'), end
	}
	r, end := jsontext.ResultAt(b, js, i)
	switch r.Type {
	case gjson.String:
		return appendQuote(dst, r.Str), end
	case gjson.Number:
		return strconv.AppendFloat(dst, r.Num, 'g', -1, 64), end
	}
	return append(dst, r.Raw...), end
}

// appendQuote is strconv.AppendQuote, byte for byte (a digest is a stored tip): a
// string of printable ASCII other than '"' and '\\', which tool arguments' keys and
// most of their values are, is quoted as it is, without strconv's rune by rune walk.
func appendQuote(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return strconv.AppendQuote(dst, s)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// writeCollapsed hashes s with runs of whitespace collapsed to one space (or dropped
// when dropAll). The collapsed text goes to the digest through a stack buffer, in
// writes of up to its size: one digest write per word would cost more than the hash.
// Printable ASCII is taken a run at a time: a single space between words is already
// canonical, so only runs of spaces, other whitespace and non-ASCII bytes are looked at
// one by one.
func writeCollapsed(d *xxhash.Digest, s string, dropAll bool) {
	s = strings.TrimSpace(s)
	w := collapser{d: d, dropAll: dropAll}
	for i := 0; i < len(s); {
		j, double := printableRun(s, i)
		if j > i {
			w.run(s[i:j], double)
			i = j
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiSpace[c] {
				w.space = true
			} else {
				w.text(s[i : i+1])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			w.space = true
		} else {
			w.text(s[i : i+size])
		}
		i += size
	}
	w.flush()
}

// printableRun returns the end of the run of bytes 0x20..0x7f that starts at i, and
// whether it holds two spaces in a row.
func printableRun(s string, i int) (int, bool) {
	double, prev := false, false // prev: the byte before i is a space
	for i < len(s) {
		if i+8 <= len(s) {
			w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
			if m := ((w-lo8*0x20)&^w | w) & hi8; m == 0 {
				sp := zeroBytes(w ^ (lo8 * ' '))
				if sp&(sp>>8) != 0 || prev && sp&0x80 != 0 {
					double = true
				}
				prev = sp>>63 != 0
				i += 8
				continue
			}
		}
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf {
			return i, double
		}
		if c == ' ' && prev {
			double = true
		}
		prev = c == ' '
		i++
	}
	return i, double
}

// zeroBytes sets the high bit of exactly the zero bytes of t.
func zeroBytes(t uint64) uint64 {
	const low7 = 0x7f7f7f7f7f7f7f7f
	return ^((t&low7 + low7) | t | low7)
}

// collapser buffers the canonical text on its way to the digest.
type collapser struct {
	d       *xxhash.Digest
	dropAll bool
	space   bool // whitespace seen since the last text: one space is due before more text
	n       int
	buf     [1024]byte
}

// run takes printable ASCII, whose spaces may need collapsing.
func (w *collapser) run(r string, double bool) {
	k := 0
	for k < len(r) && r[k] == ' ' {
		k++
	}
	if k > 0 {
		w.space = true
		r = r[k:]
	}
	t := len(r)
	for t > 0 && r[t-1] == ' ' {
		t--
	}
	trailing := t < len(r)
	r = r[:t]
	if r == "" {
		return
	}
	if w.dropAll || double {
		for len(r) > 0 {
			sp := strings.IndexByte(r, ' ')
			if sp < 0 {
				w.text(r)
				break
			}
			w.text(r[:sp])
			w.space = true
			for sp < len(r) && r[sp] == ' ' {
				sp++
			}
			r = r[sp:]
		}
	} else {
		w.text(r)
	}
	if trailing {
		w.space = true
	}
}

// text writes non-whitespace text, after the space that is due.
func (w *collapser) text(t string) {
	if w.space {
		w.space = false
		if !w.dropAll {
			if w.n == len(w.buf) {
				w.flush()
			}
			w.buf[w.n] = ' '
			w.n++
		}
	}
	for len(t) > 0 {
		if w.n == len(w.buf) {
			w.flush()
		}
		c := copy(w.buf[w.n:], t)
		w.n += c
		t = t[c:]
	}
}

func (w *collapser) flush() {
	_, _ = w.d.Write(w.buf[:w.n])
	w.n = 0
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// Candidates returns the chain hashes of the prefixes of msgs that end with an
// assistant message, longest first: only those can be an episode's tip (the history
// right after an answer).
func Candidates(msgs []protocol.Message, chain []uint64) (tips []uint64, ends []int) {
	n := Answers(msgs)
	if n == 0 {
		return nil, nil
	}
	return AppendCandidates(make([]uint64, 0, n), make([]int, 0, n), msgs, chain)
}

// Answers is how many of msgs are the assistant's: the number of Candidates.
func Answers(msgs []protocol.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].Role == "assistant" {
			n++
		}
	}
	return n
}

// AppendCandidates appends Candidates(msgs, chain) to tips and ends: a caller that
// sizes them once (Answers) grows no slice append by append.
func AppendCandidates(tips []uint64, ends []int, msgs []protocol.Message, chain []uint64) ([]uint64, []int) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" {
			tips = append(tips, chain[i])
			ends = append(ends, i+1)
		}
	}
	return tips, ends
}

// SketchTip is the stitching tip of a history whose hash is prev (of Chain or
// LooseChain) followed by an answer whose recorded copy was cut, known by its sketch:
// the agent sends the whole answer back, whose hash the cut copy cannot give (see
// protocol.Sketch). Its hash is not a chain hash, so that it never meets one.
func SketchTip(prev uint64, s *protocol.Sketch) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:8], prev)
	binary.LittleEndian.PutUint64(b[8:16], s.Sum64())
	copy(b[16:], "sketch:\x00")
	return xxhash.Sum64(b[:])
}

// SketchCandidates is Candidates for the tips of cut answers: the SketchTip of each
// prefix of msgs that ends with an assistant message past msgs[:after], longest first;
// chain is the Chain or LooseChain of msgs. A call computes them only when no chain
// tip continues it up to its last answer, so that calls that stitch pay nothing.
func SketchCandidates(msgs []protocol.Message, chain []uint64, after int) (tips []uint64, ends []int) {
	var sk protocol.Sketch
	for i := len(msgs) - 1; i >= after; i-- {
		if msgs[i].Role != "assistant" {
			continue
		}
		var prev uint64
		if i > 0 {
			prev = chain[i-1]
		}
		sk.Of(&msgs[i])
		tips = append(tips, SketchTip(prev, &sk))
		ends = append(ends, i+1)
	}
	return tips, ends
}

// TaskID is the id of a task given no X-CAM-Task-Id: a hash of its normalised text —
// whitespace collapsed and volatile parts (dates, absolute paths, ids:
// protocol.Stable) replaced — so that every run of one task groups together, in any
// folder, on any day, in any session.
func TaskID(task string) string {
	d := xxhash.New()
	writeCollapsed(d, protocol.Stable(task), false)
	var b [8]byte
	h := d.Sum64()
	for i := range 8 {
		b[i] = byte(h >> (56 - 8*i))
	}
	return prefixedHex("t_", b[:])
}

// ValidID accepts the episode and task ids an agent may send in X-CAM-* headers (and
// the rollout API passes on as such): 1–128 characters of A-Z a-z 0-9 . _ : -.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// ResponseTip is the stitching tip of a provider-side response id (OpenAI Responses):
// the episode whose turn produced the response is stored under it (Store.SetTip), and
// a call with previous_response_id set to that id claims it instead of stitching by
// messages. The "resp:" prefix keeps it apart from message-chain hashes.
func ResponseTip(id string) uint64 { return xxhash.Sum64String("resp:" + id) }
