package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Stamp identifies a version of the file at path by size and modification time: ""
// when no file is named, "missing" when it cannot be read.
func Stamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}

// Watcher reloads a config file when it changes and when asked to (SIGHUP).
type Watcher struct {
	Path   string // the file; "" = the built-in defaults, with nothing to reload
	Getenv func(string) (string, bool)
	Apply  func(*Config) error // a config that loaded and validated
	Log    *slog.Logger
	Poll   time.Duration // how often the file's Stamp is checked
}

// Run reloads the file when its Stamp is no longer the one last loaded (loaded, at
// first) and on each receive from hup, until ctx ends. A config that does not load
// or validate is refused with a log line; the old one keeps serving.
func (w Watcher) Run(ctx context.Context, loaded string, hup <-chan os.Signal) {
	t := time.NewTicker(w.Poll)
	defer t.Stop()
	last := loaded
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-t.C:
			st := Stamp(w.Path)
			if st == last {
				continue
			}
			last = st
		}
		if w.Path == "" {
			w.Log.Warn("SIGHUP: camproxy runs on built-in defaults; there is no config file to reload")
			continue
		}
		cfg, err := Load(w.Path, w.Getenv)
		if err != nil {
			w.Log.Error("config reload refused; the old config keeps serving", "file", w.Path, "err", err)
			continue
		}
		if err := w.Apply(cfg); err != nil {
			w.Log.Warn("config reload", "file", w.Path, "err", err)
		}
	}
}
