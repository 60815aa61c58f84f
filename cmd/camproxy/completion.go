package main

import (
	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// completionCmd prints a shell's completion script, generated from the command
// tree: the scripts ask camproxy itself (its hidden __complete command) what fits,
// so they follow the installed version's commands, flags and flag values.
func (c *cli) completionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script",
		Long: `Print the shell completion script. The script asks camproxy itself what fits
(commands, flags, a flag's choices, files), so it follows the installed version.`,
		Example: `  bash:  source <(camproxy completion bash)          # or save it under /etc/bash_completion.d/
  zsh:   camproxy completion zsh > "${fpath[1]}/_camproxy"   # then restart zsh
  fish:  camproxy completion fish > ~/.config/fish/completions/camproxy.fish`,
		ValidArgs: []cobra.Completion{"bash", "zsh", "fish"},
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			switch {
			case len(args) != 1:
				p.Add("want one shell: bash, zsh or fish")
			case args[0] != "bash" && args[0] != "zsh" && args[0] != "fish":
				p.Add("unknown shell %q: want bash, zsh or fish", args[0])
			}
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(c.stdout, true)
			case "zsh":
				return root.GenZshCompletion(c.stdout)
			}
			return root.GenFishCompletion(c.stdout, true)
		},
	}
}
