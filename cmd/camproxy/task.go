package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/proxy"
)

// explanation is task explain's answer; its JSON keys are a contract.
type explanation struct {
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

func (c *cli) taskCmd() *cobra.Command {
	var format, confPath string
	var in callInput
	explain := &cobra.Command{
		Use:   "explain FILE",
		Short: "The experiment and task rule that match a request body, its task text and task id",
		Long: `Read a request body (FILE, or - for stdin) as the proxy would and print the
experiment that would take it, the task rule that matched, the task text and the
task id the proxy records for it. The experiments and task rules are the config's
(--config, else $CAMPROXY_CONFIG, else the built-in defaults), matched by the
proxy's own matcher: --agent is the call's X-CAM-Agent, --key its credential (its
fingerprint is matched), --path the path it is sent to. The protocol is --protocol,
else the one that augments --path, else told from the body's shape.`,
		Example: `  camproxy task explain request.json
  curl -s … | camproxy task explain - --protocol anthropic --format json
  camproxy task explain --config gateway.yaml --agent support-bot --path /v1/messages request.json`,
		ValidArgsFunction: completeFiles,
		Args: c.checks(func(p *problems, args []string) {
			if len(args) != 1 {
				p.add("want one FILE (or - for stdin), got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.taskExplain(args[0], in, format, confPath)
		},
	}
	f := explain.Flags()
	choiceVar(f, &in.proto, "protocol", "", "the body's wire API (default: the one that augments --path, else told from the body)", registry.ExplainNames()...)
	f.StringVar(&in.agent, "agent", "", "the call's X-CAM-Agent header (experiments' match.agents)")
	f.StringVar(&in.key, "key", "", "the client's credential (experiments' match.key_fingerprints); camproxy key fingerprint prints its fingerprint")
	f.StringVar(&in.path, "path", "", "the path the call is sent to, with its query (experiments' match.paths)")
	choiceVar(f, &format, "format", "text", "output format", "text", "json")
	f.StringVar(&confPath, "config", "", "config whose task.rules apply (default $CAMPROXY_CONFIG, else the built-in defaults)")
	return c.group("task", "See how the proxy finds an agent's task", "  camproxy task explain request.json", explain)
}

// taskExplain is `camproxy task explain`.
func (c *cli) taskExplain(file string, in callInput, format, confPath string) error {
	stdout := c.stdout
	cfg, err := loadConfig(confPath, c.getenv)
	if err != nil {
		return err
	}
	rules, err := cfg.Task.Compile()
	if err != nil {
		return usagef("%v", err)
	}
	xs, err := app.Experiments(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	var body []byte
	if file == "-" {
		body, err = io.ReadAll(c.stdin)
	} else {
		body, err = os.ReadFile(file)
	}
	if err != nil {
		return fmt.Errorf("task explain: %w", err)
	}
	ex, err := explainCall(body, in, xs, rules)
	if err != nil {
		return fmt.Errorf("task explain: %s: %w", file, err)
	}
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(ex)
	}
	rule := ex.Rule
	if rule == "" {
		rule = "none matched: the call gets no context (X-CAM-Context: skip)"
	}
	experiment := ex.Experiment
	if experiment == "" {
		experiment = "none takes it and there is no default: relayed untouched, unrecorded"
	}
	_, err = fmt.Fprintf(stdout, "protocol:   %s\nexperiment: %s\nrule:       %s\ntask_id:    %s\ntask:\n%s\n", ex.Protocol, experiment, rule, ex.TaskID, indent(ex.Task))
	if err == nil && ex.Hashed != ex.Task {
		_, err = fmt.Fprintf(stdout, "hashed (volatile parts replaced):\n%s\n", indent(ex.Hashed))
	}
	return err
}

// callInput is what task explain knows of a call besides its body.
type callInput struct {
	proto string // an explain name; "" = the one augmenting path, else told from the body
	path  string // with its query; "" = unknown (no experiment's path glob matches)
	agent string // X-CAM-Agent
	key   string // the client's credential
}

// Path, RawPath, Header and Query make a callInput the registry.Call the proxy's
// matcher and parsers read: the agent in X-CAM-Agent, the key as a bearer token.
func (in callInput) Path() []byte    { return registry.PathCall(in.path).Path() }
func (in callInput) RawPath() []byte { return registry.PathCall(in.path).RawPath() }
func (in callInput) Query(name string) []byte {
	return registry.PathCall(in.path).Query(name)
}
func (in callInput) Header(name string) []byte {
	switch {
	case strings.EqualFold(name, "X-CAM-Agent") && in.agent != "":
		return []byte(in.agent)
	case strings.EqualFold(name, "Authorization") && in.key != "":
		return []byte("Bearer " + in.key)
	}
	return nil
}

// explainTask is explainCall of a body alone, with no experiments: its task by rules.
func explainTask(body []byte, proto string, rules []protocol.TaskRule) (*explanation, error) {
	return explainCall(body, callInput{proto: proto}, nil, rules)
}

// explainCall reads body as the proxy does: the experiment the proxy's matcher
// (proxy.Choose) picks among xs, and the body read by the route of the protocol
// (told from the body when neither in.proto nor in.path names one: registry.Detect)
// with that experiment's task rules; when none takes it, with rules. The registry is
// the one table of protocols and Choose the one matcher: the CLI cannot read a call
// otherwise than the proxy.
func explainCall(body []byte, in callInput, xs []*proxy.Experiment, rules []protocol.TaskRule) (*explanation, error) {
	p := registry.ByExplain(in.proto)
	switch {
	case in.proto != "" && p == nil:
		return nil, fmt.Errorf("unknown protocol %q", in.proto)
	case p == nil && in.path != "":
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
	if in.path == "" {
		// No path: the body alone, as ParseBody reads it.
		q := *p
		q.Parse = func(_ registry.Call, b []byte, r []protocol.TaskRule) (protocol.Request, error) {
			return p.ParseBody(b, r)
		}
		p = &q
	}
	ch, err := proxy.Choose(xs, p, in, body)
	if errors.Is(err, proxy.ErrNoExperiment) {
		ch.Request, err = p.Parse(in, body, rules)
	}
	if err != nil {
		return nil, err
	}
	v := ch.Request.Parsed()
	ex := &explanation{Protocol: p.Explain, Rule: v.TaskRule, Task: v.Task, TaskID: episode.TaskID(v.Task), Hashed: protocol.Stable(v.Task)}
	if ch.Experiment != nil {
		ex.Experiment = ch.Experiment.Name
	}
	return ex, nil
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
