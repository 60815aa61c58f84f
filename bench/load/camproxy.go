package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/proxy"
)

// episodeIdle is the harness's episodes.idle_timeout: short, so that the run can show
// the episode store empty again once its episodes have idled out.
const episodeIdle = 5 * time.Second

// startCamproxy builds camproxy in-process from a config, as `camproxy serve` does: a
// CAM arm (every episode gets context; the cache is warmed before measuring) and the
// file replay sink in dir. rec replaces the recorder when not nil.
func startCamproxy(upstreamAddr, camURL, dir string, rec proxy.Recorder) (*app.App, error) {
	cfg := config.Default()
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = "http://" + upstreamAddr
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL = "cam", camURL+"/v1"
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiment.Arms = []config.Arm{{Name: "cam", Weight: 1, Augmenter: "cam"}}
	cfg.Episodes.IdleTimeout = episodeIdle
	cfg.Server.MaxInFlight = overloadLimit // 0: the default (overload.go)
	cfg.Replay.Sinks = []string{"file://" + filepath.Join(dir, "replay")}
	cfg.Replay.SpoolDir = filepath.Join(dir, "spool")
	if err := os.MkdirAll(cfg.Replay.SpoolDir, 0o755); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Recorder: rec})
	if err != nil {
		return nil, err
	}
	return a, a.Start()
}

// discard is a recorder that drops every turn: camproxy with recording off.
type discard struct{}

func (discard) Record(*episode.Turn) {}
