package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"

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
	a, err := app.New(cfg, app.Options{Logger: log})
	if err != nil {
		return usagef("%v", err)
	}
	return a.Run(ctx)
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
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, usagef("config: %v", err)
		}
		return nil, usagef("%v", err)
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
