package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/memlimit"
)

func (c *cli) serveCmd() *cobra.Command {
	var path string
	var logs cobracli.LogFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the gateway",
		Long: `Serve the gateway: the data plane (agents' model calls) and the admin plane
(/v1/feedback, /metrics, /readyz, the dashboard at /ui).

The config is --config, else $CAMPROXY_CONFIG, else the built-in defaults (data plane
on 127.0.0.1:8080, admin on 127.0.0.1:9090, replay into ./camproxy-data). The file is
reloaded when it changes and on SIGHUP; a config that does not validate is refused
and the old one keeps serving. SIGTERM drains calls in flight, then exits 0.`,
		Example: `  camproxy serve
  camproxy serve --config camproxy.yaml --log-format text`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) { p.NoArgs(args) }),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.serve(cmd.Context(), path, logs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "config file (default $CAMPROXY_CONFIG, else built-in defaults)")
	logs.Define(f)
	return cmd
}

func (c *cli) serve(ctx context.Context, path string, logs cobracli.LogFlags) error {
	log := logs.Logger(c.stderr)
	if path == "" {
		path, _ = c.getenv("CAMPROXY_CONFIG")
	}
	// The file's version as loaded, taken before it is read: an edit made while
	// starting is a change the watcher sees (taken later, it would be the baseline).
	loaded := config.Stamp(path)
	cfg, err := loadConfig(path, c.getenv)
	if err != nil {
		return err
	}
	if n := memlimit.Apply(c.getenv); n > 0 {
		log.Info("heap kept under 90% of the container's memory limit (set GOMEMLIMIT to choose)", "bytes", n)
	}
	a, err := app.New(cfg, app.Options{Logger: log, Version: version})
	if err != nil {
		return cobracli.Usagef("%v", err)
	}
	// The config is reloaded on SIGHUP and when its file changes.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	w := config.Watcher{Path: path, Getenv: c.getenv, Apply: a.Reload, Log: log, Poll: configPoll}
	go w.Run(ctx, loaded, hup)
	return a.Run(ctx)
}

// configPoll is how often the config file is checked for changes.
const configPoll = 2 * time.Second

// loadConfig reads --config, else $CAMPROXY_CONFIG, else uses the built-in defaults.
// Any problem with the file is bad config (exit 2).
func loadConfig(path string, getenv func(string) (string, bool)) (*config.Config, error) {
	if path == "" {
		path, _ = getenv("CAMPROXY_CONFIG")
	}
	if path == "" {
		return config.Default(), nil
	}
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, cobracli.Usagef("%v", err) // config.Load's errors say "config" and the file
	}
	return cfg, nil
}
