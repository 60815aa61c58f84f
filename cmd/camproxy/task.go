package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/app"
	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/proxy"
)

func (c *cli) taskCmd() *cobra.Command {
	var format, confPath string
	var in proxy.CallInput
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
		ValidArgsFunction: cobracli.CompleteFiles,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			if len(args) != 1 {
				p.Add("want one FILE (or - for stdin), got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.taskExplain(args[0], in, format, confPath)
		},
	}
	f := explain.Flags()
	cobracli.ChoiceVar(f, &in.Protocol, "protocol", "", "the body's wire API (default: the one that augments --path, else told from the body)", registry.ExplainNames()...)
	f.StringVar(&in.Agent, "agent", "", "the call's X-CAM-Agent header (experiments' match.agents)")
	f.StringVar(&in.Key, "key", "", "the client's credential (experiments' match.key_fingerprints); camproxy key fingerprint prints its fingerprint")
	f.StringVar(&in.Target, "path", "", "the path the call is sent to, with its query (experiments' match.paths)")
	cobracli.ChoiceVar(f, &format, "format", "text", "output format", "text", "json")
	f.StringVar(&confPath, "config", "", "config whose task.rules apply (default $CAMPROXY_CONFIG, else the built-in defaults)")
	return c.runner.Group("task", "See how the proxy finds an agent's task", "  camproxy task explain request.json", explain)
}

// taskExplain is `camproxy task explain`.
func (c *cli) taskExplain(file string, in proxy.CallInput, format, confPath string) error {
	stdout := c.stdout
	cfg, err := loadConfig(confPath, c.getenv)
	if err != nil {
		return err
	}
	rules, err := cfg.Task.Compile()
	if err != nil {
		return cobracli.Usagef("%v", err)
	}
	xs, err := app.Experiments(cfg)
	if err != nil {
		return cobracli.Usagef("%v", err)
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
	ex, err := proxy.Explain(body, in, xs, rules)
	if err != nil {
		return fmt.Errorf("task explain: %s: %w", file, err)
	}
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(ex)
	}
	return ex.WriteText(stdout)
}
