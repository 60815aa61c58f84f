package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/proxy"
)

func (c *cli) keyCmd() *cobra.Command {
	fingerprint := &cobra.Command{
		Use:   "fingerprint [KEY]",
		Short: "The sha256 fingerprint of a client's key, whose prefix an experiment's match.key_fingerprints takes",
		Long: `Print the lower-case hex sha256 of a client's credential: the fingerprint the proxy
computes of the key a call carries (Authorization's bearer token, x-api-key, api-key,
x-goog-api-key or ?key=; a SigV4 signature's access key id). An experiment's
match.key_fingerprints lists prefixes of it (8 to 64 hex digits), so the key itself
is never in the config. With no KEY the key is read from stdin, and stays out of
the shell's history; surrounding whitespace and a "Bearer " scheme are dropped.`,
		Example: `  camproxy key fingerprint < research.key
  printf %s "$RESEARCH_API_KEY" | camproxy key fingerprint | cut -c1-12`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			if len(args) > 1 {
				p.Add("want at most one KEY (none: read from stdin), got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			var key []byte
			if len(args) == 1 {
				key = []byte(args[0])
			} else {
				var err error
				if key, err = io.ReadAll(c.stdin); err != nil {
					return fmt.Errorf("key fingerprint: reading stdin: %w", err)
				}
			}
			key = proxy.ClientKey(key)
			if len(key) == 0 {
				return cobracli.Usagef("key fingerprint: no key given (an argument, or on stdin)")
			}
			fp := proxy.KeyFingerprint(key)
			_, err := fmt.Fprintf(c.stdout, "%s\n", fp[:])
			return err
		},
	}
	return c.runner.Group("key", "Fingerprint a client's key for an experiment's match", "  camproxy key fingerprint < client.key", fingerprint)
}
