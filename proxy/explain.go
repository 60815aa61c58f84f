package proxy

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// Explanation is what `camproxy task explain` says of a call: how the proxy reads
// it. Its JSON keys are a contract.
type Explanation struct {
	Protocol string `json:"protocol"`
	// Experiment is the experiment that would take the call; "" when none would (the
	// call is relayed untouched, and its task is read by the top-level rules).
	Experiment string `json:"experiment"`
	Rule       string `json:"rule"`    // "" when no rule matched
	Task       string `json:"task"`    // what the augmenter is asked about
	TaskID     string `json:"task_id"` // what the episode records
	// Hashed is the text the id is a hash of: the task with its volatile parts
	// replaced (protocol.Stable).
	Hashed string `json:"hashed"`
}

// CallInput is what is known of a call besides its body. It is the registry.Call
// the matcher and the parsers read: the agent in X-CAM-Agent, the key as a bearer
// token.
type CallInput struct {
	Protocol string // an explain name (registry.ByExplain); "" = the one augmenting the path, else told from the body
	Target   string // the path, with its query; "" = unknown (no experiment's path glob matches)
	Agent    string // X-CAM-Agent
	Key      string // the client's credential
}

func (in CallInput) Path() []byte    { return registry.PathCall(in.Target).Path() }
func (in CallInput) RawPath() []byte { return registry.PathCall(in.Target).RawPath() }
func (in CallInput) Query(name string) []byte {
	return registry.PathCall(in.Target).Query(name)
}
func (in CallInput) Header(name string) []byte {
	switch {
	case strings.EqualFold(name, "X-CAM-Agent") && in.Agent != "":
		return []byte(in.Agent)
	case strings.EqualFold(name, "Authorization") && in.Key != "":
		return []byte("Bearer " + in.Key)
	}
	return nil
}

// Explain reads body as the proxy does: the experiment Choose picks among xs, and
// the body read by the route of the protocol (told from the body when neither
// in.Protocol nor in.Target names one: registry.Detect) with that experiment's task
// rules; when none takes it, with rules. The registry is the one table of protocols
// and Choose the one matcher: task explain cannot read a call otherwise than the
// proxy.
func Explain(body []byte, in CallInput, xs []*Experiment, rules []protocol.TaskRule) (*Explanation, error) {
	p := registry.ByExplain(in.Protocol)
	switch {
	case in.Protocol != "" && p == nil:
		return nil, fmt.Errorf("unknown protocol %q", in.Protocol)
	case p == nil && in.Target != "":
		if i, augmented := registry.Match(registry.All, in); augmented {
			p = registry.All[i]
		}
	}
	if p == nil {
		var err error
		if p, err = registry.Detect(body); err != nil {
			return nil, err
		}
	}
	if in.Target == "" {
		// No path: the body alone, as ParseBody reads it.
		q := *p
		q.Parse = func(_ registry.Call, b []byte, r []protocol.TaskRule) (protocol.Request, error) {
			return p.ParseBody(b, r)
		}
		p = &q
	}
	ch, err := Choose(xs, p, in, body)
	if errors.Is(err, ErrNoExperiment) {
		ch.Request, err = p.Parse(in, body, rules)
	}
	if err != nil {
		return nil, err
	}
	v := ch.Request.Parsed()
	ex := &Explanation{Protocol: p.Explain, Rule: v.TaskRule, Task: v.Task, TaskID: episode.TaskID(v.Task), Hashed: protocol.Stable(v.Task)}
	if ch.Experiment != nil {
		ex.Experiment = ch.Experiment.Name
	}
	return ex, nil
}

// WriteText writes ex for a person: a label a line, the task's own lines indented,
// and what "none" means where nothing matched.
func (ex *Explanation) WriteText(w io.Writer) error {
	rule := ex.Rule
	if rule == "" {
		rule = "none matched: the call gets no context (X-CAM-Context: skip)"
	}
	experiment := ex.Experiment
	if experiment == "" {
		experiment = "none takes it and there is no default: relayed untouched, unrecorded"
	}
	_, err := fmt.Fprintf(w, "protocol:   %s\nexperiment: %s\nrule:       %s\ntask_id:    %s\ntask:\n%s\n", ex.Protocol, experiment, rule, ex.TaskID, indent(ex.Task))
	if err == nil && ex.Hashed != ex.Task {
		_, err = fmt.Fprintf(w, "hashed (volatile parts replaced):\n%s\n", indent(ex.Hashed))
	}
	return err
}

// indent prefixes each line of s with two spaces, so that a task's own lines stand
// apart from the labels.
func indent(s string) string {
	out := make([]byte, 0, len(s)+16)
	out = append(out, "  "...)
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == '\n' && i+1 < len(s) {
			out = append(out, "  "...)
		}
	}
	return string(out)
}
