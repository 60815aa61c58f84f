package episode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"

	"github.com/camproxy/camproxy/protocol"
)

func msgs(pairs ...string) []protocol.Message {
	var out []protocol.Message
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, protocol.Message{Role: pairs[i], Content: pairs[i+1]})
	}
	return out
}

func TestChainCanonical(t *testing.T) {
	base := []protocol.Message{
		{Role: "system", Content: "policy"},
		{Role: "user", Content: "book a  flight\n"},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "c1", Name: "search", Arguments: `{"from": "SFO", "to":"JFK"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "[]"},
	}
	reserialised := []protocol.Message{
		{Role: "system", Content: " policy"},
		{Role: "user", Content: "book a flight"},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "c1", Name: "search", Arguments: "{\"to\": \"JFK\",\n \"from\":\"SFO\"}"}}},
		{Role: "tool", ToolCallID: "c1", Content: "[]"},
	}
	a, b := Chain(base), Chain(reserialised)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("prefix %d: whitespace-only differences changed the hash", i)
		}
	}
	cases := map[string]func(m []protocol.Message){
		"content":   func(m []protocol.Message) { m[1].Content = "book a train" },
		"role":      func(m []protocol.Message) { m[1].Role = "assistant" },
		"tool name": func(m []protocol.Message) { m[2].ToolCalls[0].Name = "book" },
		"tool args": func(m []protocol.Message) { m[2].ToolCalls[0].Arguments = `{"from":"LAX"}` },
		"tool id":   func(m []protocol.Message) { m[3].ToolCallID = "c2" },
		"word join": func(m []protocol.Message) { m[1].Content = "booka flight" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := make([]protocol.Message, len(base))
			copy(m, base)
			m[2].ToolCalls = append([]protocol.ToolCall(nil), base[2].ToolCalls...)
			mutate(m)
			if Chain(m)[3] == a[3] {
				t.Fatalf("changing %s did not change the hash", name)
			}
		})
	}
	// The chain is a chain: hash i depends on every earlier message.
	if Chain(msgs("user", "x", "assistant", "y"))[1] == Chain(msgs("user", "z", "assistant", "y"))[1] {
		t.Fatal("prefix change did not propagate")
	}
}

func TestArgumentsCanonical(t *testing.T) {
	same := [][2]string{
		{`{"city":"Zürich","n":1.0}`, `{"n":1,"city":"Z\u00fcrich"}`},
		{`{"p":"a/b","h":"<b>"}`, `{"h":"\u003cb\u003e","p":"a\/b"}`},
		{`{"a":[1,{"y":2,"x":true}],"b":null}`, `{ "b" : null , "a" : [ 1.0 , { "x" : true , "y" : 2 } ] }`},
	}
	for _, c := range same {
		a := Chain([]protocol.Message{{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "1", Name: "f", Arguments: c[0]}}}})
		b := Chain([]protocol.Message{{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "1", Name: "f", Arguments: c[1]}}}})
		if a[0] != b[0] {
			t.Errorf("%s and %s are one value but hash differently", c[0], c[1])
		}
	}
	x := Chain([]protocol.Message{{Role: "assistant", ToolCalls: []protocol.ToolCall{{Name: "f", Arguments: `{"a":"1"}`}}}})
	y := Chain([]protocol.Message{{Role: "assistant", ToolCalls: []protocol.ToolCall{{Name: "f", Arguments: `{"a":1}`}}}})
	if x[0] == y[0] {
		t.Error("a string and a number must not hash alike")
	}
}

func TestCandidatesLongestFirst(t *testing.T) {
	m := msgs("system", "s", "user", "u", "assistant", "a1", "tool", "t", "assistant", "a2", "user", "u2")
	tips, ends := Candidates(m, Chain(m))
	if len(tips) != 2 || ends[0] != 5 || ends[1] != 3 {
		t.Fatalf("ends = %v, want [5 3]", ends)
	}
	if tips, _ := Candidates(msgs("system", "s", "user", "u"), nil); len(tips) != 0 {
		t.Fatal("a first turn must have no candidates")
	}
}

func stores(t *testing.T) map[string]func(idle time.Duration) Store {
	return map[string]func(idle time.Duration) Store{
		"memory": func(idle time.Duration) Store { return NewMemory(idle, nil) },
		"redis": func(idle time.Duration) Store {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
			if err := rdb.Ping(context.Background()).Err(); err != nil {
				t.Skipf("redis at 127.0.0.1:6379 not reachable (%v); make test starts one", err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			return NewRedis(rdb, idle)
		},
		"redis-cluster": func(idle time.Duration) Store {
			return NewRedis(testkit.RedisURLClient(t, cluster.Get(t).URL()), idle)
		},
		"fallback": func(idle time.Duration) Store {
			return NewFallback(NewMemory(idle, nil), NewMemory(idle, nil), 0, nil, nil)
		},
	}
}

// TestStoreAdvance: Advance is Update, then SetTip of each tip in order, on every
// store: the tips queue behind the SetTips before them, each is claimed once, and the
// episode reads back as advanced.
func TestStoreAdvance(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := mk(time.Minute)
			defer s.Close()
			ep := &Episode{ID: NewID(), Arm: "cam", Turns: 1, History: 3}
			if _, _, err := s.Create(ctx, ep); err != nil {
				t.Fatal(err)
			}
			a, b := uint64(time.Now().UnixNano())|1, uint64(time.Now().UnixNano())&^1
			other := NewID()
			if err := s.SetTip(ctx, a, other); err != nil {
				t.Fatal(err)
			}
			next := *ep
			next.Turns, next.History = 2, 5
			if err := s.Advance(ctx, &next, a, b); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, ep.ID); err != nil || got.Turns != 2 || got.History != 5 {
				t.Fatalf("after Advance, Get = %+v, %v; want turn 2, history 5", got, err)
			}
			for i, c := range []struct {
				tip  uint64
				want string
			}{{a, other}, {a, ep.ID}, {a, ep.ID}, {b, ep.ID}, {b, ep.ID}} {
				if id, pos, ok, err := s.Claim(ctx, []uint64{c.tip}); err != nil || !ok || id != c.want || pos != 0 {
					t.Fatalf("claim %d = %q at %d (ok %v, err %v), want %q", i, id, pos, ok, err, c.want)
				}
			}
			// Without tips it is Update.
			next.Turns = 3
			if err := s.Advance(ctx, &next); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Get(ctx, ep.ID); got.Turns != 3 {
				t.Fatalf("after Advance without tips, Get = %+v; want turn 3", got)
			}
		})
	}
}

// TestMemoryAdvanceAllocates: a finished turn's store call — the episode updated, two
// new tips set — allocates nothing (tips are held by value, a tip set once holds no
// slice); maps growing is all the allocation left, a fraction of a call's.
func TestMemoryAdvanceAllocates(t *testing.T) {
	m := NewMemory(time.Minute, nil)
	defer m.Close()
	ctx := context.Background()
	ep := &Episode{ID: NewID()}
	_, _, _ = m.Create(ctx, ep)
	tip := uint64(1)
	if n := testing.AllocsPerRun(2000, func() {
		_ = m.Advance(ctx, ep, tip*0x9E3779B97F4A7C15, (tip+1)*0x9E3779B97F4A7C15)
		tip += 2
	}); n >= 1 {
		t.Fatalf("Advance allocated %.1f times per call, want 0", n)
	}
}

func TestStoreContract(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := mk(time.Minute)
			defer s.Close()
			id := NewID()
			if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get unknown: %v, want ErrNotFound", err)
			}
			ep := &Episode{ID: id, Arm: "cam", Context: "ctx A", StartedAt: time.Now().UTC().Truncate(time.Millisecond)}
			got, created, err := s.Create(ctx, ep)
			if err != nil || !created || got.Context != "ctx A" {
				t.Fatalf("Create = %+v %v %v", got, created, err)
			}
			other := *ep
			other.Context = "ctx B"
			got, created, err = s.Create(ctx, &other)
			if err != nil || created || got.Context != "ctx A" {
				t.Fatalf("second Create must return the first episode: %+v %v %v", got, created, err)
			}
			got.Turns = 3
			if err := s.Update(ctx, got); err != nil {
				t.Fatal(err)
			}
			if g, _ := s.Get(ctx, id); g.Turns != 3 || g.Context != "ctx A" || !g.StartedAt.Equal(ep.StartedAt) {
				t.Fatalf("after update: %+v", g)
			}

			// Tips: each SetTip is claimed once, then the latest is returned again.
			tip := uint64(time.Now().UnixNano())
			a, b := NewID(), NewID()
			_ = s.SetTip(ctx, tip, a)
			_ = s.SetTip(ctx, tip, b)
			unknown := tip + 1
			for i, want := range []string{a, b, b} {
				id, pos, ok, err := s.Claim(ctx, []uint64{unknown, tip})
				if err != nil || !ok || id != want || pos != 1 {
					t.Fatalf("claim %d = %q pos %d ok %v err %v, want %q at 1", i, id, pos, ok, err, want)
				}
			}
			if _, _, ok, _ := s.Claim(ctx, []uint64{unknown}); ok {
				t.Fatal("unknown tip claimed")
			}
			// A released claim is claimed again before the others.
			c := NewID()
			_ = s.SetTip(ctx, tip, c)
			_ = s.Release(ctx, tip, a)
			for i, want := range []string{a, c} {
				if id, _, _, _ := s.Claim(ctx, []uint64{tip}); id != want {
					t.Fatalf("after release, claim %d = %q, want %q", i, id, want)
				}
			}
		})
	}
}

func TestStoreConcurrentClaims(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := mk(time.Minute)
			defer s.Close()
			tip := uint64(time.Now().UnixNano()) ^ 0xabcdef
			want := map[string]bool{}
			for i := range 6 {
				id := fmt.Sprintf("ep-%d-%d", tip, i)
				want[id] = true
				_ = s.SetTip(ctx, tip, id)
			}
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					id, _, ok, err := s.Claim(ctx, []uint64{tip})
					if err != nil || !ok {
						t.Error(err, ok)
					}
					mu.Lock()
					got[id]++
					mu.Unlock()
				})
			}
			wg.Wait()
			for id := range want {
				if got[id] != 1 {
					t.Fatalf("episode %s claimed %d times; six parallel runs must continue six episodes", id, got[id])
				}
			}
		})
	}
}

func TestMemoryExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := NewMemory(time.Minute, clock)
	defer m.Close()
	ctx := context.Background()
	_, _, _ = m.Create(ctx, &Episode{ID: "a"})
	_ = m.SetTip(ctx, 7, "a")
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := m.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatal("idle episode still served")
	}
	m.expire()
	if e, tp := m.Len(); e != 0 || tp != 0 {
		t.Fatalf("after expiry: %d episodes %d tips left (leak)", e, tp)
	}
}

func FuzzChainWhitespace(f *testing.F) {
	f.Add("book a  flight\n", "{\"a\": 1}")
	f.Add("é\u00a0x\u2003 y", "")
	f.Fuzz(func(t *testing.T, content, args string) {
		m := []protocol.Message{{Role: "assistant", Content: content, ToolCalls: []protocol.ToolCall{{Name: "f", Arguments: args}}}}
		padded := []protocol.Message{{Role: "assistant", Content: " \t" + content + "\n", ToolCalls: []protocol.ToolCall{{Name: "f", Arguments: args + " "}}}}
		if Chain(m)[0] != Chain(padded)[0] {
			t.Fatalf("surrounding whitespace changed the hash of %q", content)
		}
	})
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"ep_123": true, "run-4.task:7": true, "": false, "a b": false, "a\r\nX-Evil: 1": false,
		"ü": false, string(make([]byte, 129)): false,
	} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) = %v", id, !want)
		}
	}
}

// TestChainVolatile: a conversation resumed on another day, in another folder or with
// a rebuilt system prompt hashes as before where stitching needs it to, and a changed
// request or answer still changes the hash.
func TestChainVolatile(t *testing.T) {
	base := []protocol.Message{
		{Role: "system", Content: "You are an agent.\nWorking directory: /tmp/run1/repo\nToday's date: 2026-11-24\nModel: opus (1M context)"},
		{Role: "user", Content: "<system-reminder>\nToday's date is 2026-11-24.\n</system-reminder>\nList the files."},
		{Role: "assistant", Content: "README.md and main.go, updated 2026-11-24."},
		{Role: "tool", ToolCallID: "c1", Content: "ok /tmp/run1/repo"},
	}
	strict, loose := Chain(base), LooseChain(base)
	if strict[0] == loose[0] {
		t.Fatal("the loose chain hashes the system text")
	}
	same := map[string]func(m []protocol.Message){
		"another day and folder in the system prompt": func(m []protocol.Message) {
			m[0].Content = "You are an agent.\nWorking directory: /home/ann/repo\nToday's date: 2027-01-02\nModel: opus (1M context)"
		},
		"another reminder": func(m []protocol.Message) {
			m[1].Content = "List the files.\n<system-reminder>todo: empty</system-reminder>"
		},
		"another date in the ask": func(m []protocol.Message) { m[1].Content = "List the files." },
	}
	for name, mutate := range same {
		m := slices.Clone(base)
		mutate(m)
		if Chain(m)[3] != strict[3] {
			t.Errorf("%s: the strict chain changed", name)
		}
		if LooseChain(m)[3] != loose[3] {
			t.Errorf("%s: the loose chain changed", name)
		}
	}
	// A rebuilt system prompt: the loose chain alone keeps the episode.
	m := slices.Clone(base)
	m[0].Content = "You are an agent.\nModel: opus"
	if Chain(m)[3] == strict[3] || LooseChain(m)[3] != loose[3] {
		t.Error("a rebuilt system prompt: want the strict chain changed and the loose one kept")
	}
	differ := map[string]func(m []protocol.Message){
		"request":           func(m []protocol.Message) { m[1].Content = "Delete the files." },
		"answer's date":     func(m []protocol.Message) { m[2].Content = "README.md and main.go, updated 2026-11-25." },
		"tool output's dir": func(m []protocol.Message) { m[3].Content = "ok /tmp/run2/repo" },
		"system dropped":    func(m []protocol.Message) { m[0].Role = "user" },
	}
	for name, mutate := range differ {
		m := slices.Clone(base)
		mutate(m)
		if Chain(m)[3] == strict[3] || LooseChain(m)[3] == loose[3] {
			t.Errorf("changing the %s did not change both chains", name)
		}
	}
	if HasSystem(base[1:]) || !HasSystem(base) {
		t.Error("HasSystem")
	}
	if Extend(loose[2], &base[3]) != loose[3] || Extend(strict[2], &base[3]) != strict[3] {
		t.Error("Extend does not extend both chains as they hash")
	}
}

func TestTaskIDStable(t *testing.T) {
	a := TaskID("Summarise /tmp/TestX1/001/repo/README.md as of 2026-11-24 for session fa511ccb-cbf7-4445-aa5f-bd8434a64f50.")
	b := TaskID("Summarise  /home/ann/repo/README.md as of 2027-03-09 for session 0b7e9d3c-1f55-4c1e-9a39-58f1e0d6c2aa.")
	c := TaskID("Translate /home/ann/repo/README.md as of 2027-03-09 for session 0b7e9d3c-1f55-4c1e-9a39-58f1e0d6c2aa.")
	if a != b {
		t.Errorf("one request in two runs: %s and %s", a, b)
	}
	if b == c {
		t.Errorf("two requests, one id %s", b)
	}
}
