package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
)

func (c *cli) serveCmd() *cobra.Command {
	var path string
	var logs logFlags
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
		Args: c.checks(func(p *problems, args []string) { p.noArgs(args) }),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.serve(cmd.Context(), path, logs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "config file (default $CAMPROXY_CONFIG, else built-in defaults)")
	logs.define(f)
	return cmd
}

func (c *cli) serve(ctx context.Context, path string, logs logFlags) error {
	log := logs.logger(c.stderr)
	if path == "" {
		path, _ = c.getenv("CAMPROXY_CONFIG")
	}
	// The file's version as loaded, taken before it is read: an edit made while
	// starting is a change the watcher sees (taken later, it would be the baseline).
	loaded := fileStamp(path)
	cfg, err := loadConfig(path, c.getenv)
	if err != nil {
		return err
	}
	if n := setMemoryLimit(c.getenv); n > 0 {
		log.Info("heap kept under 90% of the container's memory limit (set GOMEMLIMIT to choose)", "bytes", n)
	}
	a, err := app.New(cfg, app.Options{Logger: log, Version: version})
	if err != nil {
		return usagef("%v", err)
	}
	go watchConfig(ctx, path, loaded, c.getenv, a, log)
	return a.Run(ctx)
}

// configPoll is how often the config file is checked for changes.
const configPoll = 2 * time.Second

// watchConfig reloads the config on SIGHUP or when its file changes. A config that
// does not load or validate is refused with a log line; the old one keeps serving.
func watchConfig(ctx context.Context, path, loaded string, getenv func(string) (string, bool), a *app.App, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(configPoll)
	defer t.Stop()
	last := loaded
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-t.C:
			st := fileStamp(path)
			if st == last {
				continue
			}
			last = st
		}
		if path == "" {
			log.Warn("SIGHUP: camproxy runs on built-in defaults; there is no config file to reload")
			continue
		}
		cfg, err := config.Load(path, getenv)
		if err != nil {
			log.Error("config reload refused; the old config keeps serving", "file", path, "err", err)
			continue
		}
		if err := a.Reload(cfg); err != nil {
			log.Warn("config reload", "file", path, "err", err)
		}
	}
}

// fileStamp identifies a version of a file by size and modification time.
func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}

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
		return nil, usagef("%v", err) // config.Load's errors say "config" and the file
	}
	return cfg, nil
}

// logFlags are the flags of a long-running command's log.
type logFlags struct{ level, format string }

func (l *logFlags) define(f *pflag.FlagSet) {
	choiceVar(f, &l.level, "log-level", "info", "least severe log level written", "debug", "info", "warn", "error")
	choiceVar(f, &l.format, "log-format", "json", "log line format", "json", "text")
}

// logger writes to w as the flags say (choice flags hold only valid words).
func (l logFlags) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.level))
	opts := &slog.HandlerOptions{Level: level}
	if l.format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
