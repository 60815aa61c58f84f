package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// explanation is task explain's answer; its JSON keys are a contract.
type explanation struct {
	Protocol string `json:"protocol"`
	Rule     string `json:"rule"`    // "" when no rule matched
	Task     string `json:"task"`    // what the augmenter is asked about
	TaskID   string `json:"task_id"` // what the episode records
	// Hashed is the text the id is a hash of: the task with its volatile parts
	// replaced (protocol.Stable).
	Hashed string `json:"hashed"`
}

func (c *cli) taskCmd() *cobra.Command {
	var proto, format, confPath string
	explain := &cobra.Command{
		Use:   "explain FILE",
		Short: "The task rule that matches a request body, its task text and task id",
		Long: `Read a request body (FILE, or - for stdin) as the proxy would and print the task
rule that matched, the task text and the task id the proxy records for it. The
protocol is told from the body's shape unless given; the task rules are the
config's (--config, else $CAMPROXY_CONFIG, else the built-in defaults).`,
		Example: `  camproxy task explain request.json
  curl -s … | camproxy task explain - --protocol anthropic --format json`,
		ValidArgsFunction: completeFiles,
		Args: c.checks(func(p *problems, args []string) {
			if len(args) != 1 {
				p.add("want one FILE (or - for stdin), got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.taskExplain(args[0], proto, format, confPath)
		},
	}
	f := explain.Flags()
	choiceVar(f, &proto, "protocol", "", "the body's wire API (default: told from the body)", registry.ExplainNames()...)
	choiceVar(f, &format, "format", "text", "output format", "text", "json")
	f.StringVar(&confPath, "config", "", "config whose task.rules apply (default $CAMPROXY_CONFIG, else the built-in defaults)")
	return c.group("task", "See how the proxy finds an agent's task", "  camproxy task explain request.json", explain)
}

// taskExplain is `camproxy task explain`.
func (c *cli) taskExplain(file, proto, format, confPath string) error {
	stdout := c.stdout
	cfg, err := loadConfig(confPath, c.getenv)
	if err != nil {
		return err
	}
	rules, err := cfg.Task.Compile()
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
	ex, err := explainTask(body, proto, rules)
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
	_, err = fmt.Fprintf(stdout, "protocol: %s\nrule:     %s\ntask_id:  %s\ntask:\n%s\n", ex.Protocol, rule, ex.TaskID, indent(ex.Task))
	if err == nil && ex.Hashed != ex.Task {
		_, err = fmt.Fprintf(stdout, "hashed (volatile parts replaced):\n%s\n", indent(ex.Hashed))
	}
	return err
}

// explainTask parses body as the proxy's route for proto does (told from the body
// when "": registry.Detect) and derives the task id as the proxy does. The registry
// is the one table of protocols: the CLI cannot read a body otherwise than the proxy.
func explainTask(body []byte, proto string, rules []protocol.TaskRule) (*explanation, error) {
	p := registry.ByExplain(proto)
	if proto == "" {
		var err error
		if p, err = registry.Detect(body); err != nil {
			return nil, err
		}
	} else if p == nil {
		return nil, fmt.Errorf("unknown protocol %q", proto)
	}
	req, err := p.ParseBody(body, rules)
	if err != nil {
		return nil, err
	}
	v := req.Parsed()
	return &explanation{Protocol: p.Explain, Rule: v.TaskRule, Task: v.Task, TaskID: episode.TaskID(v.Task), Hashed: protocol.Stable(v.Task)}, nil
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
