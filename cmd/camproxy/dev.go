package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/devupstream"
)

func (c *cli) devCmd() *cobra.Command {
	var listen string
	upstream := &cobra.Command{
		Use:   "upstream",
		Short: "A fake OpenAI-compatible model for trying camproxy without one",
		Long: `A fake OpenAI-compatible model for trying camproxy without one: it answers
POST /v1/chat/completions (JSON, or SSE with "stream": true) with one deterministic
sentence saying how many characters of task context camproxy spliced into the first
user message, and GET /v1/models.`,
		Example: `  camproxy dev upstream &
  UPSTREAM_URL=http://127.0.0.1:8000 camproxy serve --config examples/rag-only.yaml`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) { p.NoArgs(args) }),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("dev upstream: %w", err)
			}
			fmt.Fprintf(c.stdout, "camproxy dev upstream: a fake OpenAI-compatible model on http://%s (POST /v1/chat/completions, GET /v1/models); Ctrl-C stops it\n", ln.Addr())
			if err := devupstream.Serve(cmd.Context(), ln); err != nil {
				return fmt.Errorf("dev upstream: %w", err)
			}
			return nil
		},
	}
	upstream.Flags().StringVar(&listen, "listen", "127.0.0.1:8000", "the address to answer on")
	return c.runner.Group("dev", "Tools for trying camproxy on a laptop", "  camproxy dev upstream --listen 127.0.0.1:8000", upstream)
}
