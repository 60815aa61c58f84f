// Package demo is a small deterministic agent benchmark that shows camproxy's
// learning loop close without a model: an environment of tasks that each need one
// hidden rule, a scripted agent (an OpenAI-compatible upstream) that succeeds only
// when the context camproxy gave it states its task's rule, failures whose tool
// results reveal the missing rule, scripted reflector and mutator models that turn
// what the failures reveal into playbook edits through the playbook tool calls, and
// the harness that drives episodes through camproxy with the real openai-go client
// and reports each reward. It proves the plumbing, not model quality: every
// "model" here is a few lines of Go.
package demo

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/camproxy/camproxy/playbook"
)

// Rule is one hidden policy: the agent must submit its tasks with Code, and only
// learns so from context that states Text.
type Rule struct {
	Topic string // the keyword a task of this rule carries: "[topic] …"
	Code  string // what submit must carry
	Text  string // the rule as a failure reveals it and a playbook should state it
}

// Task is one task of the environment; it needs exactly one rule.
type Task struct {
	ID   string // t01…
	Text string // the user message the harness sends
	Rule int    // index into Env.Rules
}

// Env is the environment: its rules and tasks, fixed for a given size.
type Env struct {
	Rules []Rule
	Tasks []Task
}

// ToolSubmit is the agent's one tool: {"code": "..."}.
const ToolSubmit = "submit"

// Outcomes of a submit, as the agent reads them in the tool result.
const (
	Accepted = "ACCEPTED"
	Rejected = "REJECTED"
	// Reveal precedes the rule's text in a rejection: what the optimiser looks for.
	Reveal = "policy requires:"
	// NoCode is what the agent submits when its context states no rule for its topic.
	NoCode = "NONE"
)

// ruleSpecs are the hidden rules, in a fixed order. The codes look arbitrary so no
// agent could guess them: only a context that states the rule helps.
var ruleSpecs = []struct{ topic, noun, code string }{
	{"baggage", "Baggage claims", "BG-4417"},
	{"refund", "Refund requests", "RF-2093"},
	{"seating", "Seat changes", "ST-5581"},
	{"upgrade", "Cabin upgrades", "UP-3306"},
	{"pets", "Pet bookings", "PT-7724"},
	{"cancellation", "Cancellations", "CN-1148"},
	{"rebooking", "Rebookings", "RB-6652"},
	{"meals", "Special meal orders", "ML-9035"},
	{"insurance", "Travel insurance claims", "IN-2270"},
	{"lounge", "Lounge passes", "LG-8813"},
	{"wheelchair", "Wheelchair assistance requests", "WC-3391"},
	{"minors", "Unaccompanied minor bookings", "UM-6048"},
}

// people and flights vary the tasks of one rule, so a learned rule has to
// generalise from the tasks that revealed it to the others.
var (
	people  = []string{"Ana Silva", "Bo Chen", "Chidi Okafor", "Dana Levi", "Emil Novak", "Farah Haddad", "Goran Ilic", "Hana Sato"}
	flights = []string{"CX-120", "LH-455", "AF-1032", "QF-8", "UA-907", "KL-1611", "NH-212", "EK-71", "AC-853", "TK-1"}
	asks    = map[string]string{
		"baggage":      "reports a suitcase lost on flight %s; file the claim.",
		"refund":       "wants the fare of flight %s refunded to the original card.",
		"seating":      "asks to move to an aisle seat on flight %s.",
		"upgrade":      "wants to upgrade to business on flight %s with points.",
		"pets":         "wants to bring a small dog in the cabin on flight %s.",
		"cancellation": "wants to cancel the booking on flight %s.",
		"rebooking":    "missed flight %s and needs the next available one.",
		"meals":        "needs a gluten-free meal on flight %s.",
		"insurance":    "claims travel insurance after flight %s was diverted.",
		"lounge":       "wants a lounge pass before flight %s.",
		"wheelchair":   "needs a wheelchair at the gate of flight %s.",
		"minors":       "is booking a 9-year-old alone on flight %s.",
	}
)

// MaxRules is the most rules New can make.
var MaxRules = len(ruleSpecs)

// New makes the environment of rules rules (1…MaxRules) and tasksPerRule tasks for
// each: the same sizes always make the same tasks. Tasks interleave the rules
// (t01 needs rule 0, t02 rule 1, …) so that any slice of them spans many rules.
func New(rules, tasksPerRule int) (*Env, error) {
	if rules < 1 || rules > len(ruleSpecs) {
		return nil, fmt.Errorf("demo: rules must be 1…%d, got %d", len(ruleSpecs), rules)
	}
	if tasksPerRule < 1 {
		return nil, fmt.Errorf("demo: tasks per rule must be ≥ 1, got %d", tasksPerRule)
	}
	e := &Env{}
	for _, s := range ruleSpecs[:rules] {
		e.Rules = append(e.Rules, Rule{Topic: s.topic, Code: s.code, Text: s.noun + " must be submitted with code " + s.code + "."})
	}
	n := rules * tasksPerRule
	for i := range n {
		r := i % rules
		k := i / rules
		person := people[(i*3+k)%len(people)]
		flight := flights[(i*7+r)%len(flights)]
		e.Tasks = append(e.Tasks, Task{
			ID:   fmt.Sprintf("t%02d", i+1),
			Text: fmt.Sprintf("[%s] %s %s", ruleSpecs[r].topic, person, fmt.Sprintf(asks[ruleSpecs[r].topic], flight)),
			Rule: r,
		})
	}
	return e, nil
}

// Default is the demo's environment: 40 tasks over 8 rules.
func Default() *Env {
	e, err := New(8, 5)
	if err != nil {
		panic(err) // fixed sizes within range
	}
	return e
}

// Task returns the task with id.
func (e *Env) Task(id string) (Task, bool) {
	for _, t := range e.Tasks {
		if t.ID == id {
			return t, true
		}
	}
	return Task{}, false
}

// RuleOf is the rule a task needs.
func (e *Env) RuleOf(t Task) Rule { return e.Rules[t.Rule] }

// Execute runs the agent's tool call for task t and returns the tool result the
// agent gets and whether the task is done. A rejection reveals the rule the task
// needed: that is what a failure's trajectory teaches.
func (e *Env) Execute(t Task, tool, args string) (result string, ok bool) {
	rule := e.RuleOf(t)
	if tool != ToolSubmit {
		return fmt.Sprintf("%s: unknown tool %q; %s", Rejected, tool, rejection(rule)), false
	}
	code := codeArg.FindStringSubmatch(args)
	if code == nil || code[1] != rule.Code {
		return rejection(rule), false
	}
	return fmt.Sprintf("%s: %s request %s completed.", Accepted, rule.Topic, t.ID), true
}

func rejection(r Rule) string { return Rejected + ": " + Reveal + " " + r.Text }

// codeArg reads the code of a submit call's JSON arguments.
var codeArg = regexp.MustCompile(`"code"\s*:\s*"([^"\\]*)"`)

// topicOf reads "[topic]" at the start of a task text.
var topicOf = regexp.MustCompile(`^\s*\[([a-z]+)\]`)

// ruleCode finds "code XX-NNNN" in a line of context.
var ruleCode = regexp.MustCompile(`\bcode ([A-Z]{2}-[0-9]{4})\b`)

// Decide is the scripted agent's whole policy: given the text of the first user
// message (the task, with whatever context camproxy spliced into it), the code it
// submits. It reads the topic of the task and takes the first line of the context
// that names a code for that topic's rule; without one it submits NoCode. So the
// agent succeeds exactly when the context states its task's rule (and no earlier
// line misleads it).
func (e *Env) Decide(message string) string {
	m := topicOf.FindStringSubmatch(message)
	if m == nil {
		return NoCode
	}
	noun := ""
	for _, s := range ruleSpecs {
		if s.topic == m[1] {
			noun = strings.ToLower(s.noun)
		}
	}
	if noun == "" {
		return NoCode
	}
	// The first line is the task itself; the context follows it.
	lines := strings.Split(message, "\n")
	for _, line := range lines[1:] {
		if !strings.Contains(strings.ToLower(line), noun) {
			continue
		}
		if c := ruleCode.FindStringSubmatch(line); c != nil {
			return c[1]
		}
	}
	return NoCode
}

// Misleads reports whether a playbook states a wrong code for one of the rules: an
// entry that names a rule's kind of request with a code that is not the rule's.
func (e *Env) Misleads(pb *playbook.Playbook) bool {
	for _, en := range pb.Entries {
		low := strings.ToLower(en.Content)
		for _, s := range ruleSpecs {
			if !strings.Contains(low, strings.ToLower(s.noun)) {
				continue
			}
			for _, m := range ruleCode.FindAllStringSubmatch(en.Content, -1) {
				if m[1] != s.code {
					return true
				}
			}
		}
	}
	return false
}
