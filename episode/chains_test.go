package episode

import (
	"reflect"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
)

// TestChainsRemembered: Chains gives Chain and LooseChain exactly, the first time
// (slots empty: digests computed and stored) and the next (digests from the slots),
// for messages whose canonical form is not their text (volatile parts, envelopes,
// reserialised arguments) and for messages read without slots.
// TestChainSeedOfATask: a declared task alone seeds the chains as it did before
// experiments seeded them, so the tips a store holds of declared tasks stay found.
func TestChainSeedOfATask(t *testing.T) {
	if got, want := chainSeed("", "tau-airline-47"), xxhash.Sum64String("task\x00tau-airline-47"); got != want {
		t.Fatalf("chainSeed of a task = %x, want %x", got, want)
	}
	if chainSeed("", "") != 0 {
		t.Fatal("no experiment and no task must leave the chains Chain's")
	}
	if n := testing.AllocsPerRun(100, func() { _ = chainSeed("coding", "tau-airline-47") }); n != 0 {
		t.Fatalf("chainSeed allocates %v times", n)
	}
}

func TestChainsRemembered(t *testing.T) {
	bodies := []string{
		`{"messages":[{"role":"system","content":"Today is 2025-01-02. cwd: /home/ann/proj"},{"role":"user","content":"<system-reminder>r</system-reminder>Fix  the bug in /home/ann/proj/a.go"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"b\": 1, \"a\": \"\\u00fc\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`,
		`{"messages":[{"role":"user","content":"no system here"},{"role":"assistant","content":"done"}]}`,
		`{"messages":[{"role":"developer","content":[{"type":"text","text":"d"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`,
		`{"messages":[]}`,
	}
	for round := range 3 {
		for _, b := range bodies {
			r, err := openai.Parse([]byte(b), protocol.DefaultTaskRules())
			if err != nil {
				t.Fatal(err)
			}
			v := r.Parsed()
			if round == 2 {
				v.Slots = nil // read without a memo: computed every time
			}
			strict, loose := Chains(v, "", "")
			if !reflect.DeepEqual(strict, Chain(v.Messages)) {
				t.Fatalf("round %d, %.60s: Chains strict %x, Chain %x", round, b, strict, Chain(v.Messages))
			}
			wantLoose := LooseChain(v.Messages)
			if !HasSystem(v.Messages) {
				wantLoose = nil
			}
			if !reflect.DeepEqual(loose, wantLoose) {
				t.Fatalf("round %d, %.60s: Chains loose %x, LooseChain %x", round, b, loose, wantLoose)
			}
			// A declared task gives the same history other hashes, at every message.
			ts, tl := Chains(v, "", "tau-airline-47")
			if len(ts) != len(strict) || len(tl) != len(loose) {
				t.Fatalf("round %d, %.60s: task chains %d/%d long, want %d/%d", round, b, len(ts), len(tl), len(strict), len(loose))
			}
			for i := range ts {
				if ts[i] == strict[i] {
					t.Fatalf("round %d, %.60s: message %d hashes alike with and without a task", round, b, i)
				}
			}
			if o, _ := Chains(v, "", "tau-airline-49"); len(o) > 0 && o[len(o)-1] == ts[len(ts)-1] {
				t.Fatalf("round %d, %.60s: two tasks hash one history alike", round, b)
			}
			// An experiment seeds them too: two experiments, an experiment and none, an
			// experiment with and without the task, each hash the history apart.
			if len(strict) > 0 {
				last := func(c []uint64) uint64 { return c[len(c)-1] }
				support, _ := Chains(v, "support", "")
				coding, _ := Chains(v, "coding", "")
				supportTask, _ := Chains(v, "support", "tau-airline-47")
				seen := map[uint64]string{}
				for name, c := range map[string][]uint64{"none": strict, "support": support, "coding": coding,
					"task": ts, "support+task": supportTask} {
					if other, dup := seen[last(c)]; dup {
						t.Fatalf("round %d, %.60s: %s and %s hash one history alike", round, b, name, other)
					}
					seen[last(c)] = name
				}
			}
			for i := range v.Messages {
				if i < len(v.Slots) && round > 0 {
					if _, ok := v.Slots[i].Load(); !ok {
						t.Fatalf("round %d: message %d's digest not remembered", round, i)
					}
				}
			}
		}
	}
}

// TestChainsAllocateOnce: the strict and loose chains of a call share one
// allocation, and neither reaches into the other when appended to.
func TestChainsAllocateOnce(t *testing.T) {
	req, err := openai.Parse([]byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`), protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	v := req.Parsed()
	strict, loose := Chains(v, "x", "")
	if n := testing.AllocsPerRun(50, func() { strict, loose = Chains(v, "x", "") }); n != 1 {
		t.Fatalf("Chains allocated %v times, want once", n)
	}
	want := append([]uint64(nil), loose...)
	_ = append(strict, 1)
	if !reflect.DeepEqual(loose, want) {
		t.Fatal("appending to the strict chain wrote into the loose one")
	}
}
