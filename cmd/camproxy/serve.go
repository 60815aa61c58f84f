package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
)

func serve(ctx context.Context, args []string, stderr io.Writer, getenv func(string) (string, bool)) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (default $CAMPROXY_CONFIG, else built-in defaults)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		return usagef("serve: %v", err)
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*path, getenv)
	if err != nil {
		return err
	}
	if n := setMemoryLimit(getenv); n > 0 {
		log.Info("heap kept under 90% of the container's memory limit (set GOMEMLIMIT to choose)", "bytes", n)
	}
	a, err := app.New(cfg, app.Options{Logger: log, Version: version})
	if err != nil {
		return usagef("%v", err)
	}
	if *path == "" {
		*path, _ = getenv("CAMPROXY_CONFIG")
	}
	go watchConfig(ctx, *path, getenv, a, log)
	return a.Run(ctx)
}

// configPoll is how often the config file is checked for changes.
const configPoll = 2 * time.Second

// watchConfig reloads the config on SIGHUP or when its file changes. A config that
// does not load or validate is refused with a log line; the old one keeps serving.
func watchConfig(ctx context.Context, path string, getenv func(string) (string, bool), a *app.App, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(configPoll)
	defer t.Stop()
	last := fileStamp(path)
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

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want json or text", format)
}
