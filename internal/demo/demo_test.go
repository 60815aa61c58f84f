package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

func TestEnvIsDeterministic(t *testing.T) {
	a, b := Default(), Default()
	if !slices.Equal(a.Tasks, b.Tasks) || !slices.Equal(a.Rules, b.Rules) {
		t.Fatal("two environments of the same size differ")
	}
	if len(a.Tasks) != 40 || len(a.Rules) != 8 {
		t.Fatalf("default: %d tasks over %d rules, want 40 over 8", len(a.Tasks), len(a.Rules))
	}
	perRule := map[int]int{}
	ids, codes := map[string]bool{}, map[string]bool{}
	for _, task := range a.Tasks {
		perRule[task.Rule]++
		if ids[task.ID] {
			t.Fatalf("task id %s twice", task.ID)
		}
		ids[task.ID] = true
		r := a.RuleOf(task)
		if strings.Contains(task.Text, r.Code) || strings.Contains(task.Text, "\n") {
			t.Fatalf("task %s gives its code away or spans lines: %q", task.ID, task.Text)
		}
		if !strings.HasPrefix(task.Text, "["+r.Topic+"]") {
			t.Fatalf("task %s does not name its topic %q: %q", task.ID, r.Topic, task.Text)
		}
	}
	for i, r := range a.Rules {
		if perRule[i] != 5 {
			t.Fatalf("rule %d has %d tasks, want 5", i, perRule[i])
		}
		if codes[r.Code] || Mislead(r.Text) == r.Text {
			t.Fatalf("rule %d: code %s repeated or not misleadable", i, r.Code)
		}
		codes[r.Code] = true
	}
	texts := map[string]bool{}
	for _, task := range a.Tasks {
		texts[task.Text] = true
	}
	if len(texts) != len(a.Tasks) {
		t.Fatalf("%d distinct task texts for %d tasks: tasks of a rule must differ", len(texts), len(a.Tasks))
	}
	for _, bad := range [][2]int{{0, 1}, {MaxRules + 1, 1}, {3, 0}} {
		if _, err := New(bad[0], bad[1]); err == nil {
			t.Fatalf("New(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

// context renders rules as a playbook's context, the way the playbook augmenter does.
func contextOf(rules ...string) string {
	pb := &playbook.Playbook{}
	for i, r := range rules {
		pb.Entries = append(pb.Entries, playbook.Entry{ID: fmt.Sprintf("e%d", i), Section: Section, Content: r})
	}
	return pb.Context(0)
}

// agentBody is the chat body the upstream receives on turn 1: the task with the
// context spliced after it (placement append_to_task, template "\n\n{{context}}").
func agentBody(task, ctx string) string {
	user := task
	if ctx != "" {
		user += "\n\n" + ctx
	}
	b, _ := json.Marshal(map[string]any{"model": AgentModel, "messages": []map[string]any{
		{"role": "system", "content": systemPrompt}, {"role": "user", "content": user}}})
	return string(b)
}

// play runs task t with ctx through the scripted agent and the environment and
// returns the episode as the replay buffer would hold it.
func play(t *testing.T, env *Env, task Task, ctx string, id string) *replay.Episode {
	t.Helper()
	rep := env.AgentReply(gjson.Parse(agentBody(task.Text, ctx)))
	if len(rep.ToolCalls) != 1 || rep.ToolCalls[0].Name != ToolSubmit {
		t.Fatalf("task %s: the agent did not call submit: %+v", task.ID, rep)
	}
	tc := rep.ToolCalls[0]
	result, ok := env.Execute(task, tc.Name, tc.Arguments)
	body, _ := json.Marshal(map[string]any{"messages": []map[string]any{
		{"role": "user", "content": task.Text},
		{"role": "assistant", "tool_calls": []map[string]any{{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}}},
		{"role": "tool", "tool_call_id": tc.ID, "content": result}}})
	final := env.AgentReply(gjson.ParseBytes(body))
	reward := 0.0
	if ok {
		reward = 1
	}
	return &replay.Episode{ID: id, TaskID: task.ID, Task: task.Text, Arm: "champion", Context: ctx, Reward: &reward, Success: &ok,
		Messages: []protocol.Message{
			{Role: "system", Content: systemPrompt}, {Role: "user", Content: task.Text},
			{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: tc.ID, Type: "function", Name: tc.Name, Arguments: tc.Arguments}}},
			{Role: "tool", ToolCallID: tc.ID, Content: result}, {Role: "assistant", Content: final.Content}}}
}

func succeeded(ep *replay.Episode) bool { return *ep.Success }

func TestAgentSucceedsIffContextStatesItsRule(t *testing.T) {
	env := Default()
	all := make([]string, len(env.Rules))
	for i, r := range env.Rules {
		all[i] = r.Text
	}
	for _, task := range env.Tasks {
		own := env.RuleOf(task).Text
		others := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == own })
		cases := []struct {
			name string
			ctx  string
			want bool
		}{
			{"no context", "", false},
			{"its rule alone", contextOf(own), true},
			{"every rule", contextOf(all...), true},
			{"every rule but its own", contextOf(others...), false},
			{"its rule misstated", contextOf(Mislead(own)), false},
			{"misleading line before the right one", contextOf(Mislead(own), own), false},
			{"right line before a misleading one", contextOf(own, Mislead(own)), true},
			{"its code without its rule", contextOf("Always double-check code " + env.RuleOf(task).Code + " twice."), false},
		}
		for _, c := range cases {
			ep := play(t, env, task, c.ctx, "ep")
			if succeeded(ep) != c.want {
				t.Errorf("task %s, %s: success %v, want %v (submitted %s)", task.ID, c.name, succeeded(ep), c.want, ep.Messages[2].ToolCalls[0].Arguments)
			}
		}
	}
	// The task line itself never counts as context, whatever it says.
	task := env.Tasks[0]
	if got := env.Decide(task.Text + " " + env.RuleOf(task).Text); got != NoCode {
		t.Fatalf("a rule inside the task line was read as context: %s", got)
	}
}

func TestFailureRevealsTheMissingRule(t *testing.T) {
	env := Default()
	for _, task := range env.Tasks {
		rule := env.RuleOf(task)
		for _, call := range [][2]string{{ToolSubmit, `{"code":"NONE"}`}, {ToolSubmit, `{"code":"` + Mislead(rule.Code) + `"}`},
			{ToolSubmit, `not json`}, {"cancel", `{}`}} {
			res, ok := env.Execute(task, call[0], call[1])
			if ok || !strings.HasPrefix(res, Rejected) {
				t.Fatalf("task %s: %v accepted: %s", task.ID, call, res)
			}
			if got := Revealed("item_1_failure.md:12: " + res); !slices.Equal(got, []string{rule.Text}) {
				t.Fatalf("task %s: rejection %q reveals %q, want %q", task.ID, res, got, rule.Text)
			}
		}
		res, ok := env.Execute(task, ToolSubmit, `{"code": "`+rule.Code+`"}`)
		if !ok || !strings.HasPrefix(res, Accepted) || strings.Contains(res, Reveal) {
			t.Fatalf("task %s: right code: %v %q", task.ID, ok, res)
		}
	}
	// The rendered failure, as the optimiser's sandbox holds it, reveals the rule.
	task := env.Tasks[3]
	run := trainer.RenderRun("Item 1, failure run", play(t, env, task, "", "ep1"))
	if !strings.Contains(run, Reveal+" "+env.RuleOf(task).Text) {
		t.Fatalf("the rendered failure does not reveal the rule:\n%s", run)
	}
}

// optimiser starts the scripted models and returns them as the learner's models.
func optimiser(t *testing.T) (*Optimiser, learn.Models) {
	t.Helper()
	o := NewOptimiser()
	t.Cleanup(o.Close)
	m, err := trainer.NewModel(context.Background(), "openai/demo-optimiser", trainer.ModelOptions{BaseURL: o.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	return o, learn.Models{Reflector: m, Mutator: m}
}

// batch plays tasks with the playbook's context and pairs the runs as the learner does.
func batch(t *testing.T, env *Env, pb *playbook.Playbook, tasks []Task, iteration int) learn.Batch {
	t.Helper()
	var eps []*replay.Episode
	for i, task := range tasks {
		eps = append(eps, play(t, env, task, pb.Context(0), fmt.Sprintf("it%d-ep%02d", iteration, i)))
	}
	return learn.Batch{Iteration: iteration, Items: learn.Pair(eps, 0, 1)}
}

func contents(pb *playbook.Playbook) []string {
	var out []string
	for _, e := range pb.Entries {
		out = append(out, e.Content)
	}
	slices.Sort(out)
	return out
}

func score(t *testing.T, env *Env, pb *playbook.Playbook) int {
	t.Helper()
	n := 0
	for _, task := range env.Tasks {
		if succeeded(play(t, env, task, pb.Context(0), "score")) {
			n++
		}
	}
	return n
}

// TestScriptedOptimiserThroughStep runs the real learner step (learn.Step, real
// sandbox, real openai-go client) against the scripted models: the mutator turns
// each revealed rule into exactly one add_entry, the reflector credits the entries
// the agent followed, and the playbook's score on the environment rises.
func TestScriptedOptimiserThroughStep(t *testing.T) {
	env := Default()
	_, models := optimiser(t)
	ctx := context.Background()
	opts := learn.StepOptions{Limits: playbook.DefaultLimits(), WorkDir: t.TempDir()}

	// Step 1 on an empty playbook: tasks t01…t05 need rules 0…4 and all fail.
	v1 := &playbook.Playbook{}
	b := batch(t, env, v1, env.Tasks[:5], 1)
	res, err := learn.Step(ctx, models, v1, 2, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range env.Rules[:5] {
		want = append(want, r.Text)
	}
	slices.Sort(want)
	if got := contents(res.Playbook); !slices.Equal(got, want) {
		t.Fatalf("v2 holds %q, want the 5 revealed rules %q", got, want)
	}
	adds := 0
	for _, op := range res.Ops {
		switch {
		case op.Error != "":
			t.Fatalf("refused call: %+v", op)
		case op.Tool == playbook.ToolAdd:
			adds++
			if op.Section != Section {
				t.Fatalf("add_entry in section %q", op.Section)
			}
		case op.Tool == playbook.ToolTag:
			t.Fatalf("tag on an empty playbook: %+v", op)
		}
	}
	if adds != 5 || res.Applied != 5 {
		t.Fatalf("%d add_entry calls, %d applied; want 5", adds, res.Applied)
	}
	for _, e := range res.Playbook.Entries {
		if e.Version != 2 || len(e.Sources) == 0 {
			t.Fatalf("entry without provenance: %+v", e)
		}
	}
	v2 := res.Playbook
	if s1, s2 := score(t, env, v1), score(t, env, v2); s1 != 0 || s2 != 25 {
		t.Fatalf("scores: v1 %d, v2 %d; want 0 and 25 of 40", s1, s2)
	}

	// Step 2 with v2: t01…t05 now succeed (their entries are helpful), t06…t08 fail
	// and reveal three more rules; nothing already in v2 is added again.
	b = batch(t, env, v2, env.Tasks[:8], 2)
	res, err = learn.Step(ctx, models, v2, 3, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range env.Rules[5:8] {
		want = append(want, r.Text)
	}
	slices.Sort(want)
	if got := contents(res.Playbook); !slices.Equal(got, want) {
		t.Fatalf("v3 holds %q, want all 8 rules %q", got, want)
	}
	for _, op := range res.Ops {
		if op.Error != "" {
			t.Fatalf("refused call (a duplicate?): %+v", op)
		}
	}
	for _, e := range res.Playbook.Entries {
		wantHelpful := 0
		if e.Version == 2 {
			wantHelpful = 1 // each of t01…t05 followed its entry once and succeeded
		}
		if e.Helpful != wantHelpful || e.Harmful != 0 {
			t.Fatalf("entry %q: helpful %d harmful %d, want %d and 0", e.Content, e.Helpful, e.Harmful, wantHelpful)
		}
	}
	if s := score(t, env, res.Playbook); s != 40 {
		t.Fatalf("v3 scores %d of 40", s)
	}

	// A batch of successes only: tags, no edit.
	v3 := res.Playbook
	res, err = learn.Step(ctx, models, v3, 4, batch(t, env, v3, env.Tasks[8:16], 3), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(res.Playbook); !slices.Equal(got, want) {
		t.Fatalf("a batch without failures changed the rules: %q", got)
	}
	for _, op := range res.Ops {
		if op.Tool == playbook.ToolAdd || op.Tool == playbook.ToolDelete || op.Tool == playbook.ToolUpdate {
			t.Fatalf("edit without a failure: %+v", op)
		}
	}
}

// TestHarmfulMutator: with Harmful on the mutator deletes the good entries and
// adds misleading ones, so the version it makes scores worse; the reflector then
// tags a misleading entry harmful after a run it misled.
func TestHarmfulMutator(t *testing.T) {
	env := Default()
	opt, models := optimiser(t)
	ctx := context.Background()
	opts := learn.StepOptions{Limits: playbook.DefaultLimits(), WorkDir: t.TempDir()}
	good := &playbook.Playbook{}
	for _, r := range env.Rules[:4] {
		good.Entries = append(good.Entries, playbook.Entry{ID: "g-" + r.Topic, Section: Section, Content: r.Text})
	}
	// t05…t08 need rules 4…7, which good lacks: their failures reveal them.
	b := batch(t, env, good, env.Tasks[4:8], 1)
	opt.Harmful.Store(true)
	res, err := learn.Step(ctx, models, good, 2, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	opt.Harmful.Store(false)
	bad := res.Playbook
	var want []string
	for _, r := range env.Rules[4:8] {
		want = append(want, Mislead(r.Text))
	}
	slices.Sort(want)
	if got := contents(bad); !slices.Equal(got, want) {
		t.Fatalf("harmful version holds %q, want only misleading rules %q", got, want)
	}
	deletes := 0
	for _, op := range res.Ops {
		if op.Tool == playbook.ToolDelete && op.Error == "" {
			deletes++
		}
	}
	if deletes != 4 {
		t.Fatalf("%d entries deleted, want the 4 good ones", deletes)
	}
	if sg, sb := score(t, env, good), score(t, env, bad); sg != 20 || sb != 0 {
		t.Fatalf("scores: good %d, harmful %d; want 20 and 0", sg, sb)
	}

	// The next (normal) step sees t05 misled by its entry: harmful tag, and the
	// revealed right rule is added back.
	res, err = learn.Step(ctx, models, bad, 3, batch(t, env, bad, env.Tasks[4:5], 2), opts)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(bad.Entries, func(e playbook.Entry) bool { return e.Content == Mislead(env.Rules[4].Text) })
	misled, _ := res.Playbook.Get(bad.Entries[i].ID)
	if misled.Harmful != 1 || misled.Helpful != 0 {
		t.Fatalf("the misleading entry followed in a failure: helpful %d harmful %d", misled.Helpful, misled.Harmful)
	}
	if !slices.Contains(contents(res.Playbook), env.Rules[4].Text) {
		t.Fatalf("the revealed rule was not added back: %q", contents(res.Playbook))
	}
}

func TestOutcomesAndRevealedParseGrep(t *testing.T) {
	grep := strings.Join([]string{
		`4 lines match "x" in .:`,
		`item_1_failure.md:14:   "code": "NONE"`,
		`item_1_failure.md:18: REJECTED: policy requires: Baggage claims must be submitted with code BG-4417.`,
		`item_1_success.md:14:   "code": "BG-4417"`,
		`item_1_success.md:18: ACCEPTED: baggage request t01 completed.`,
		`item_2_failure.md:18: REJECTED: no code before me`,
		`item_3_failure.md:9: {"content": "REJECTED: policy requires: Refund requests must be submitted with code RF-2093."}`,
		`item_4_failure.md:9: REJECTED: policy requires: baggage claims  must be submitted with code BG-4417.`,
	}, "\n")
	got := Outcomes(grep)
	want := []Outcome{{"item_1_failure.md", "NONE", false}, {"item_1_success.md", "BG-4417", true}}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %+v, want %+v", got, want)
	}
	rules := Revealed(grep)
	wantRules := []string{"Baggage claims must be submitted with code BG-4417.", "Refund requests must be submitted with code RF-2093."}
	if !slices.Equal(rules, wantRules) {
		t.Fatalf("revealed %q, want %q (duplicates by normalised text once)", rules, wantRules)
	}
}

// TestOptimiserIsStateless: the same conversation gets the same answer, whatever
// came before, and the role is read from the tools offered.
func TestOptimiserIsStateless(t *testing.T) {
	o := NewOptimiser()
	defer o.Close()
	tools := func(names ...string) []map[string]any {
		var out []map[string]any
		for _, n := range names {
			out = append(out, map[string]any{"type": "function", "function": map[string]any{"name": n}})
		}
		return out
	}
	prompt := "The playbook:\n\n[a1] (policies) Refund requests must be submitted with code RF-2093.\n\nThe batch: …"
	mut := map[string]any{"messages": []map[string]any{{"role": "user", "content": prompt}},
		"tools": tools("grep", playbook.ToolAdd, playbook.ToolDelete, playbook.ToolFinish)}
	body, _ := json.Marshal(mut)
	first := o.Reply(gjson.ParseBytes(body))
	o.Reply(gjson.Parse(`{"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"tag_entry"}}]}`))
	if again := o.Reply(gjson.ParseBytes(body)); !slices.Equal(first.ToolCalls, again.ToolCalls) || len(first.ToolCalls) != 1 || first.ToolCalls[0].Name != "grep" {
		t.Fatalf("first turn: %+v then %+v", first, again)
	}
	// With the grep result in, the mutator adds only the rule the playbook lacks.
	mut["messages"] = []map[string]any{{"role": "user", "content": prompt},
		{"role": "assistant", "tool_calls": []map[string]any{{"id": "c1", "type": "function", "function": map[string]any{"name": "grep", "arguments": `{"pattern":"` + GrepReveals + `","path":"."}`}}}},
		{"role": "tool", "tool_call_id": "c1", "content": "2 lines match:\nitem_1_failure.md:9: REJECTED: policy requires: Refund requests must be submitted with code RF-2093.\nitem_2_failure.md:9: REJECTED: policy requires: Lounge passes must be submitted with code LG-8813."}}
	body, _ = json.Marshal(mut)
	rep := o.Reply(gjson.ParseBytes(body))
	if len(rep.ToolCalls) != 1 || rep.ToolCalls[0].Name != playbook.ToolAdd || gjson.Get(rep.ToolCalls[0].Arguments, "content").String() != "Lounge passes must be submitted with code LG-8813." {
		t.Fatalf("mutator: %+v", rep)
	}
	o.Harmful.Store(true)
	rep = o.Reply(gjson.ParseBytes(body))
	if len(rep.ToolCalls) != 3 || rep.ToolCalls[0].Name != playbook.ToolDelete || gjson.Get(rep.ToolCalls[0].Arguments, "entry_id").String() != "a1" {
		t.Fatalf("harmful mutator: %+v", rep)
	}
	// Asked for text (the last turn), it answers in text.
	mut["tool_choice"] = "none"
	body, _ = json.Marshal(mut)
	if rep := o.Reply(gjson.ParseBytes(body)); len(rep.ToolCalls) != 0 || rep.Content == "" {
		t.Fatalf("tool_choice none: %+v", rep)
	}
}

// FuzzOptimiserReply: whatever a request holds, the scripted models answer without
// panicking, and every tool call's arguments are a JSON object.
func FuzzOptimiserReply(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"[a] (s) x"}],"tools":[{"function":{"name":"add_entry"}}]}`)
	f.Add(`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"grep","arguments":"{\"pattern\":\"policy requires:\"}"}}]},{"role":"tool","tool_call_id":"1","content":"f:1: policy requires: X code AB-1234."}],"tools":[{"function":{"name":"add_entry"}}]}`)
	f.Add(`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"grep","arguments":"{\"pattern\":\"\\\"code\\\"|ACCEPTED|REJECTED\"}"}}]},{"role":"tool","tool_call_id":"1","content":"f:1: \"code\": \"AB-1234\"\nf:2: ACCEPTED"}],"tools":[{"function":{"name":"tag_entry"}}]}`)
	o := &Optimiser{}
	f.Fuzz(func(t *testing.T, body string) {
		for _, harmful := range []bool{false, true} {
			o.Harmful.Store(harmful)
			rep := o.Reply(gjson.Parse(body))
			for _, c := range rep.ToolCalls {
				if !gjson.Valid(c.Arguments) || !gjson.Parse(c.Arguments).IsObject() {
					t.Fatalf("call %s with arguments %q", c.Name, c.Arguments)
				}
			}
		}
		Outcomes(body)
		Revealed(body)
	})
}

// FuzzAgent: the scripted agent answers any request with a submit whose arguments
// the environment reads, or a text answer after a tool result.
func FuzzAgent(f *testing.F) {
	env := Default()
	f.Add(agentBody(env.Tasks[0].Text, contextOf(env.Rules[0].Text)))
	f.Add(`{"messages":[{"role":"user","content":[{"type":"text","text":"[pets] x\n- Pet bookings code PT-7724"}]}]}`)
	f.Add(`{"messages":[{"role":"tool","content":"ACCEPTED"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		rep := env.AgentReply(gjson.Parse(body))
		if len(rep.ToolCalls) == 0 {
			if rep.Content == "" {
				t.Fatal("neither a call nor an answer")
			}
			return
		}
		if c := codeArg.FindStringSubmatch(rep.ToolCalls[0].Arguments); c == nil {
			t.Fatalf("unreadable submit %q", rep.ToolCalls[0].Arguments)
		}
	})
}
