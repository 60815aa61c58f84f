package learn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// scripted is an in-process model: script answers each request; every request is kept.
type scripted struct {
	mu     sync.Mutex
	script func(req *trainer.Request) (*trainer.Reply, error)
	reqs   []*trainer.Request
}

func (s *scripted) Chat(_ context.Context, req *trainer.Request) (*trainer.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep a copy: the caller appends to the conversation afterwards.
	c := *req
	c.Messages = append([]trainer.Message(nil), req.Messages...)
	s.reqs = append(s.reqs, &c)
	rep, err := s.script(&c)
	if rep != nil && rep.Usage == (trainer.Usage{}) {
		rep.Usage = trainer.Usage{Input: 100, Output: 10}
	}
	return rep, err
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// turn is the number of assistant turns in the conversation so far.
func turn(req *trainer.Request) int {
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// results are the tool results of the previous turn, by call id.
func results(req *trainer.Request) map[string]string {
	out := map[string]string{}
	last := req.Messages[len(req.Messages)-1]
	for _, r := range last.Results {
		out[r.CallID] = r.Content
	}
	return out
}

func call(id, name, args string) trainer.Call { return trainer.Call{ID: id, Name: name, Args: args} }

func reward(r float64) *float64 { return &r }

func ep(id, task string, r float64) *replay.Episode {
	return &replay.Episode{ID: id, TaskID: task, Task: "Do " + task + " carefully.", Reward: reward(r),
		Messages: []protocol.Message{
			{Role: "system", Content: "You are an agent."},
			{Role: "user", Content: "please do " + task},
			{Role: "assistant", Content: "done with " + id, ToolCalls: []protocol.ToolCall{{ID: "c1", Name: "lookup", Arguments: `{"code":"` + id + `"}`}}},
			{Role: "tool", ToolCallID: "c1", Name: "lookup", Content: "result for " + id},
		}}
}

func seedPlaybook(t *testing.T) *playbook.Playbook {
	t.Helper()
	pb, err := playbook.ParseJSON([]byte(`{"entries":[
		{"entry_id":"e-keep","section":"rules","content":"Confirm the booking code before changing it.","helpful_count":0,"harmful_count":0},
		{"entry_id":"e-bad","section":"rules","content":"Always upgrade the cabin.","helpful_count":0,"harmful_count":1},
		{"entry_id":"e-edit","section":"style","content":"Be brief.","helpful_count":2,"harmful_count":0},
		{"entry_id":"e-gone","section":"others","content":"Say goodbye.","helpful_count":0,"harmful_count":0}
	],"version":"1.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// stepScript is the reflector and mutator of TestStepAppliesEveryCall. It checks,
// turn by turn, what came back from its previous calls and records it in seen.
func stepScript(t *testing.T, seen map[string]string) func(req *trainer.Request) (*trainer.Reply, error) {
	return func(req *trainer.Request) (*trainer.Reply, error) {
		reflector := strings.Contains(req.System, "You are the reflector")
		role := "mutator"
		if reflector {
			role = "reflector"
		}
		for id, out := range results(req) {
			seen[role+"/"+id] = out
		}
		switch n := turn(req); {
		case reflector && n == 0:
			seen["reflector/prompt"] = req.Messages[0].Text
			return &trainer.Reply{Calls: []trainer.Call{
				call("l", "list_files", `{}`),
				call("g", "grep", `{"pattern":"result for","path":"item_1_failure.md"}`),
				call("p", "read_file", `{"path":"playbook.json"}`),
				call("esc", "read_file", `{"path":"../../etc/passwd"}`),
			}}, nil
		case reflector && n == 1:
			return &trainer.Reply{Text: "tagging", Calls: []trainer.Call{
				call("t1", "tag_entry", `{"entry_id":"e-keep","tag":"helpful"}`),
				call("t2", "tag_entry", `{"entry_id":"e-bad","tag":"harmful"}`),
				call("t3", "tag_entry", `{"entry_id":"e-bad","tag":"harmful"}`),
				call("t4", "tag_entry", `{"entry_id":"nope","tag":"helpful"}`),
				call("t5", "tag_entry", `{"entry_id":"e-keep","tag":"great"}`),
				call("t6", "add_entry", `{"content":"Reflectors may not add."}`),
				call("t7", "tag_entry", `{"entry_id": "e-keep", "tag": `), // not JSON
				call("t8", "tag_entry", `{"entry_id":"e-keep","tag":"helpful","why":"x"}`),
			}}, nil
		case reflector && n == 2:
			return &trainer.Reply{Text: "I have nothing more to check."}, nil // no call: nudged
		case reflector:
			return &trainer.Reply{Calls: []trainer.Call{call("f", "finish", `{"summary":"Task T1 failed: the agent skipped the code check."}`)}}, nil
		case n == 0:
			seen["mutator/prompt"] = req.Messages[0].Text
			return &trainer.Reply{Calls: []trainer.Call{
				call("a1", "add_entry", `{"section":"rules","content":"For task T1, check the code twice."}`),
				call("a2", "add_entry", `{"section":"rules","content":"  CONFIRM the booking   code before changing it. "}`),
				call("u1", "update_entry", `{"entry_id":"e-edit","content":"Be brief and precise."}`),
				call("u2", "update_entry", `{"entry_id":"e-edit"}`),
				call("d1", "delete_entry", `{"entry_id":"e-gone"}`),
				call("d2", "delete_entry", `{"entry_id":"e-gone"}`),
				call("x1", "tag_entry", `{"entry_id":"e-keep","tag":"helpful"}`),
				call("x2", "rm_rf", `{}`),
			}}, nil
		case n == 1:
			return &trainer.Reply{Calls: []trainer.Call{call("p2", "read_file", `{"path":"playbook.json"}`)}}, nil
		case n == 2:
			return &trainer.Reply{Calls: []trainer.Call{call("f", "finish", `{"summary":"Added a T1 rule, sharpened style, removed goodbye."}`)}}, nil
		}
		t.Errorf("mutator called after finish")
		return nil, errors.New("script over")
	}
}

func TestStepAppliesEveryCall(t *testing.T) {
	seen := map[string]string{}
	m := &scripted{}
	m.script = stepScript(t, seen)
	base := seedPlaybook(t)
	baseJSON := string(base.JSON())
	b := Batch{Iteration: 3, State: "Earlier: agents forget codes.", Items: []Item{
		{Failure: ep("f1", "T1", 0), Success: ep("s1", "T1", 1)},
		{Failure: ep("f2", "T2", 0.2)},
	}}
	j := newMemJournal()
	res, err := Step(context.Background(), Models{Reflector: m, Mutator: m}, base, 7, b,
		StepOptions{Limits: playbook.Limits{Prune: 3, MaxEntries: 10}, Journal: j, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if string(base.JSON()) != baseJSON {
		t.Fatal("Step changed its base playbook")
	}

	// What the models saw.
	rp := seen["reflector/prompt"]
	for _, want := range []string{"[e-keep] (rules) Confirm the booking code before changing it.", "[e-gone] (others) Say goodbye.",
		"## Item 1: task T1", "- failure: item_1_failure.md, episode f1, reward 0,", "- success: item_1_success.md, episode s1, reward 1,",
		"## Item 2: task T2", "- success: none in the buffer for this task", "Earlier: agents forget codes.", "at most 12 turns"} {
		if !strings.Contains(rp, want) {
			t.Errorf("reflector prompt lacks %q:\n%s", want, rp)
		}
	}
	mp := seen["mutator/prompt"]
	for _, want := range []string{"Task T1 failed: the agent skipped the code check.", "[e-bad] (rules) Always upgrade the cabin.", "Earlier: agents forget codes."} {
		if !strings.Contains(mp, want) {
			t.Errorf("mutator prompt lacks %q:\n%s", want, mp)
		}
	}
	for key, want := range map[string]string{
		"reflector/l":   "item_1_failure.md",
		"reflector/g":   "item_1_failure.md:",
		"reflector/p":   `"entry_id": "e-bad"`,
		"reflector/esc": "error: ",
		"reflector/t1":  "ok: [e-keep] helpful=1 harmful=0",
		"reflector/t2":  "ok: [e-bad] helpful=0 harmful=2",
		"reflector/t3":  "ok: [e-bad] helpful=0 harmful=3",
		"reflector/t4":  `error: no entry has entry_id "nope"`,
		"reflector/t5":  `error: tag must be "helpful" or "harmful"`,
		"reflector/t6":  "error: add_entry is not a tool of the reflector",
		"reflector/t7":  "error: the arguments of tag_entry must be a JSON object",
		"reflector/t8":  `error: tag_entry has no argument "why"`,
		"mutator/a2":    "error: duplicate: entry [e-keep]",
		"mutator/u1":    "ok: [e-edit] updated",
		"mutator/u2":    `error: update_entry needs "content"`,
		"mutator/d1":    "ok: [e-gone] deleted",
		"mutator/d2":    `error: no entry has entry_id "e-gone"`,
		"mutator/x1":    "error: tag_entry is not a tool of the mutator",
		"mutator/x2":    `error: unknown tool "rm_rf"`,
		"mutator/p2":    "For task T1, check the code twice.",
	} {
		if !strings.Contains(seen[key], want) {
			t.Errorf("%s: got %q, want it to contain %q", key, seen[key], want)
		}
	}
	// The grep found the failure's trajectory, and the mutator's playbook.json has the tags.
	if !strings.Contains(seen["reflector/g"], "result for f1") {
		t.Errorf("grep: %q", seen["reflector/g"])
	}
	newID := seen["mutator/a1"]
	if len(newID) != 8 {
		t.Fatalf("add_entry returned %q, want an 8-hex-digit entry_id", newID)
	}

	// The edited playbook.
	pb := res.Playbook
	var ids []string
	for _, e := range pb.Entries {
		ids = append(ids, e.ID)
	}
	if got, want := strings.Join(ids, ","), "e-keep,e-edit,"+newID; got != want {
		t.Fatalf("entries %s, want %s (e-bad pruned at harmful 3, e-gone deleted)", got, want)
	}
	if strings.Join(res.Removed, ",") != "e-bad" {
		t.Errorf("removed %v", res.Removed)
	}
	keep, _ := pb.Get("e-keep")
	edit, _ := pb.Get("e-edit")
	added, _ := pb.Get(newID)
	if keep.Helpful != 1 || keep.Harmful != 0 || keep.Version != 0 {
		t.Errorf("e-keep %+v", keep)
	}
	if edit.Content != "Be brief and precise." || edit.Helpful != 2 || edit.Version != 7 || strings.Join(edit.Sources, ",") != "f1,s1,f2" {
		t.Errorf("e-edit %+v", edit)
	}
	if added.Section != "rules" || added.Content != "For task T1, check the code twice." || added.Version != 7 || strings.Join(added.Sources, ",") != "f1,s1,f2" {
		t.Errorf("added %+v", added)
	}
	// 3 tags + add + update + delete; finish and refusals do not count.
	if res.Applied != 6 {
		t.Errorf("applied %d, want 6", res.Applied)
	}
	refused := 0
	for _, op := range res.Ops {
		if op.Error != "" {
			refused++
		}
	}
	if refused != 9 || len(res.Ops) != 17 {
		t.Errorf("%d ops, %d refused; want 17 and 9: %+v", len(res.Ops), refused, res.Ops)
	}
	if res.Summary != "Added a T1 rule, sharpened style, removed goodbye." {
		t.Errorf("summary %q", res.Summary)
	}
	// Reflector 4 turns (one nudged), mutator 3.
	if res.Calls != 7 || m.calls() != 7 || res.Replayed != 0 || res.Usage != (trainer.Usage{Input: 700, Output: 70}) {
		t.Errorf("calls %d (model saw %d), replayed %d, usage %+v", res.Calls, m.calls(), res.Replayed, res.Usage)
	}
	if nudge := m.reqs[3].Messages; nudge[len(nudge)-1].Text != DefaultPrompts().Nudge {
		t.Errorf("a text answer is not nudged: %+v", nudge[len(nudge)-1])
	}
	if strings.Join(res.Sources, ",") != "f1,s1,f2" {
		t.Errorf("sources %v", res.Sources)
	}
	if got := strings.Join(j.keys, " "); got != "it3/reflector/turn1 it3/reflector/turn2 it3/reflector/turn3 it3/reflector/turn4 it3/mutator/turn1 it3/mutator/turn2 it3/mutator/turn3" {
		t.Errorf("journal keys %s", got)
	}

	// Replayed from the journal: no call, the same playbook, byte for byte.
	dead := &scripted{script: func(*trainer.Request) (*trainer.Reply, error) { return nil, errors.New("no call expected") }}
	again, err := Step(context.Background(), Models{Reflector: dead, Mutator: dead}, base, 7, b,
		StepOptions{Limits: playbook.Limits{Prune: 3, MaxEntries: 10}, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Playbook.JSON()) != string(res.Playbook.JSON()) || again.Calls != 0 || again.Replayed != 7 || dead.calls() != 0 {
		t.Fatalf("replay: calls %d replayed %d\n%s\nwant\n%s", again.Calls, again.Replayed, again.Playbook.JSON(), res.Playbook.JSON())
	}

	// A journal cut after the reflector's second turn: exactly the 5 turns missing are sent.
	cut := newMemJournal()
	for _, k := range j.keys[:2] {
		rep, _ := j.Lookup(k)
		_ = cut.Record(k, rep)
	}
	seen2 := map[string]string{}
	m2 := &scripted{}
	m2.script = stepScript(t, seen2)
	resumed, err := Step(context.Background(), Models{Reflector: m2, Mutator: m2}, base, 7, b,
		StepOptions{Limits: playbook.Limits{Prune: 3, MaxEntries: 10}, Journal: cut})
	if err != nil {
		t.Fatal(err)
	}
	if m2.calls() != 5 || resumed.Calls != 5 || resumed.Replayed != 2 || string(resumed.Playbook.JSON()) != string(res.Playbook.JSON()) {
		t.Fatalf("resume: %d calls, replayed %d", m2.calls(), resumed.Replayed)
	}
	// The first live call carries the conversation the journal rebuilt: turn 3 of the reflector.
	if turn(m2.reqs[0]) != 2 || !strings.Contains(results(m2.reqs[0])["t4"], "error: no entry") {
		t.Fatalf("resumed conversation: %+v", m2.reqs[0].Messages)
	}
}

type memJournal struct {
	keys []string
	recs map[string]*trainer.Reply
}

func newMemJournal() *memJournal { return &memJournal{recs: map[string]*trainer.Reply{}} }

func (j *memJournal) Lookup(key string) (*trainer.Reply, bool) { r, ok := j.recs[key]; return r, ok }
func (j *memJournal) Record(key string, rep *trainer.Reply) error {
	j.keys = append(j.keys, key)
	j.recs[key] = rep
	return nil
}

func TestStepTurnsAndFailures(t *testing.T) {
	b := Batch{Iteration: 1, Items: []Item{{Failure: ep("f1", "T1", 0)}}}
	ctx := context.Background()

	t.Run("no finish: MaxTurns, the last asked to finish", func(t *testing.T) {
		m := &scripted{script: func(req *trainer.Request) (*trainer.Reply, error) {
			return &trainer.Reply{Calls: []trainer.Call{call(fmt.Sprint("c", turn(req)), "list_files", `{}`)}}, nil
		}}
		res, err := Step(ctx, Models{m, m}, &playbook.Playbook{}, 2, b, StepOptions{MaxTurns: 3})
		if err != nil {
			t.Fatal(err)
		}
		if m.calls() != 6 || res.Calls != 6 || res.Applied != 0 || len(res.Playbook.Entries) != 0 {
			t.Fatalf("calls %d, res %+v", m.calls(), res)
		}
		for i, req := range m.reqs {
			last := req.Messages[len(req.Messages)-1].Text
			if isLast := i%3 == 2; isLast != strings.Contains(last, DefaultPrompts().Final) {
				t.Errorf("request %d: last turn %v, text %q", i, isLast, last)
			}
		}
	})

	t.Run("budget and duplicates", func(t *testing.T) {
		m := &scripted{script: func(req *trainer.Request) (*trainer.Reply, error) {
			if strings.Contains(req.System, "You are the reflector") {
				return &trainer.Reply{Calls: []trainer.Call{call("t", "tag_entry", `{"entry_id":"e-edit","tag":"harmful"}`), call("f", "finish", `{"summary":"s"}`)}}, nil
			}
			return &trainer.Reply{Calls: []trainer.Call{
				call("a", "add_entry", `{"content":"New rule one."}`),
				call("b", "add_entry", `{"content":"new   RULE one."}`),
				call("c", "add_entry", `{"section":"x","content":"New rule two."}`),
				call("f", "finish", `{"summary":"added two"}`),
			}}, nil
		}}
		res, err := Step(ctx, Models{m, m}, seedPlaybook(t), 2, b, StepOptions{Limits: playbook.Limits{MaxEntries: 4}})
		if err != nil {
			t.Fatal(err)
		}
		// 6 entries, 4 kept: the lowest net go first, oldest first: e-bad (−1), then
		// among the net-0 ones the oldest, e-keep (e-edit dropped to net 1).
		var ids []string
		for _, e := range res.Playbook.Entries {
			ids = append(ids, e.ID)
		}
		if len(ids) != 4 || strings.Join(res.Removed, ",") != "e-bad,e-keep" || ids[0] != "e-edit" || ids[1] != "e-gone" {
			t.Fatalf("kept %v, removed %v", ids, res.Removed)
		}
		if res.Ops[3].Error == "" || !strings.HasPrefix(res.Ops[3].Error, "duplicate") {
			t.Fatalf("duplicate not refused: %+v", res.Ops)
		}
	})

	t.Run("model failure ends the step", func(t *testing.T) {
		m := &scripted{script: func(*trainer.Request) (*trainer.Reply, error) { return nil, errors.New("boom") }}
		_, err := Step(ctx, Models{m, m}, &playbook.Playbook{}, 2, b, StepOptions{Retry: trainer.RetryPolicy{Retries: -1}})
		if err == nil || !strings.Contains(err.Error(), "reflector turn 1 of iteration 1: boom") {
			t.Fatalf("err %v", err)
		}
	})

	t.Run("empty batch", func(t *testing.T) {
		m := &scripted{}
		if _, err := Step(ctx, Models{m, m}, &playbook.Playbook{}, 2, Batch{}, StepOptions{}); !errors.Is(err, ErrNoBatch) {
			t.Fatalf("err %v", err)
		}
		if _, err := Step(ctx, Models{m, m}, &playbook.Playbook{}, 2, Batch{Items: []Item{{}}}, StepOptions{}); err == nil {
			t.Fatal("an item without runs is accepted")
		}
	})

	t.Run("too many calls in a turn", func(t *testing.T) {
		m := &scripted{script: func(req *trainer.Request) (*trainer.Reply, error) {
			if turn(req) > 0 {
				return &trainer.Reply{Calls: []trainer.Call{call("f", "finish", `{"summary":"s"}`)}}, nil
			}
			var calls []trainer.Call
			for i := range maxCallsPerTurn + 1 {
				calls = append(calls, call(fmt.Sprint(i), "list_files", `{}`))
			}
			return &trainer.Reply{Calls: calls}, nil
		}}
		if _, err := Step(ctx, Models{m, m}, &playbook.Playbook{}, 2, b, StepOptions{}); err != nil {
			t.Fatal(err)
		}
		r := results(m.reqs[1])
		if !strings.HasPrefix(r[fmt.Sprint(maxCallsPerTurn)], "error: at most") || strings.HasPrefix(r["0"], "error") {
			t.Fatalf("results %v", r)
		}
	})
}
