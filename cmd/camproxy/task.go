package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

// Protocols task explain reads: the wire APIs of the augmented routes.
var taskProtocols = []string{"openai", "responses", "anthropic", "bedrock"}

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
	choiceVar(f, &proto, "protocol", "", "the body's wire API (default: told from the body)", taskProtocols...)
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

// explainTask parses body with the adapter the proxy uses for proto (told from the
// body when "") and derives the task id as the proxy does.
func explainTask(body []byte, proto string, rules []protocol.TaskRule) (*explanation, error) {
	if proto == "" {
		var err error
		if proto, err = detectProtocol(body); err != nil {
			return nil, err
		}
	}
	req, err := parseAs(proto, body, rules)
	if err != nil {
		return nil, err
	}
	v := req.Parsed()
	return &explanation{Protocol: proto, Rule: v.TaskRule, Task: v.Task, TaskID: episode.TaskID(v.Task), Hashed: protocol.Stable(v.Task)}, nil
}

// parseAs is the proxy's parse of one route. A Bedrock body is a Converse body unless
// its shape says which InvokeModel family it is (the proxy reads that from the path).
func parseAs(proto string, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	switch proto {
	case "openai":
		return openai.Parse(body, rules)
	case "responses":
		return responses.Parse(body, rules)
	case "anthropic":
		return anthropic.Parse(body, rules)
	case "bedrock":
		if !gjson.ValidBytes(body) {
			return nil, protocol.ErrInvalidJSON
		}
		switch {
		case gjson.GetBytes(body, "anthropic_version").Exists():
			return bedrock.Parse(bedrock.Invoke, "anthropic.claude", body, rules)
		case gjson.GetBytes(body, "prompt").Type == gjson.String:
			return bedrock.Parse(bedrock.Invoke, "meta.llama3", body, rules)
		case gjson.GetBytes(body, "schemaVersion").Exists():
			return bedrock.Parse(bedrock.Invoke, "amazon.nova", body, rules)
		}
		return bedrock.Parse(bedrock.Converse, "", body, rules)
	}
	return nil, fmt.Errorf("unknown protocol %q", proto)
}

// detectProtocol tells a body's wire API from its shape:
//
//   - responses: an "input" and no "messages";
//   - bedrock: Converse's "inferenceConfig", "toolConfig" or
//     "additionalModelRequestFields", a Llama "prompt", or content blocks keyed by
//     their kind ({"text": …}, {"toolUse": …}) rather than typed;
//   - anthropic: a top-level "system", "anthropic_version", or content blocks typed
//     tool_use, tool_result, document, thinking or an image with a "source";
//   - openai (chat completions) otherwise: its bodies are the plainest, and a body
//     that is plain enough to be either reads the same in both.
func detectProtocol(body []byte) (string, error) {
	if !gjson.ValidBytes(body) {
		return "", protocol.ErrInvalidJSON
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return "", fmt.Errorf("%w: the body is not a JSON object", protocol.ErrInvalidJSON)
	}
	msgs := root.Get("messages")
	switch {
	case !msgs.Exists() && root.Get("input").Exists():
		return "responses", nil
	case root.Get("inferenceConfig").Exists() || root.Get("toolConfig").Exists() ||
		root.Get("additionalModelRequestFields").Exists() || root.Get("schemaVersion").Exists():
		return "bedrock", nil
	case !msgs.Exists() && root.Get("prompt").Type == gjson.String:
		return "bedrock", nil
	case root.Get("anthropic_version").Exists():
		return "bedrock", nil // Claude on InvokeModel: the Anthropic body without "model"
	case root.Get("system").Exists():
		if sys := root.Get("system"); sys.IsArray() && sys.Get("0.type").Type == gjson.Null && sys.Get("0.text").Exists() {
			return "bedrock", nil // Converse's system: [{"text": …}]
		}
		return "anthropic", nil
	}
	kind := "openai"
	msgs.ForEach(func(_, m gjson.Result) bool {
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			typ := b.Get("type")
			switch {
			case !typ.Exists() && (b.Get("text").Exists() || b.Get("toolUse").Exists() || b.Get("toolResult").Exists() ||
				b.Get("image").Exists() || b.Get("document").Exists()):
				kind = "bedrock"
			case slices.Contains([]string{"tool_use", "tool_result", "document", "thinking", "redacted_thinking"}, typ.Str),
				typ.Str == "image" && b.Get("source").Exists():
				kind = "anthropic"
			}
			return kind == "openai"
		})
		return kind == "openai"
	})
	return kind, nil
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
