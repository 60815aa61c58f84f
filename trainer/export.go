package trainer

import (
	"context"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/camproxy/camproxy/replay"
)

// This file exports the pieces of `train reflect` that the playbook optimiser
// (package learn) reuses: the retry policy, the sandbox over arbitrary files, the
// rendering of a run and the sandbox tools' schemas.

// ChatWithRetry calls the model with p's retries (408/409/429/5xx, timeouts and
// connection errors; a retry-after header is honoured). onRetry, if set, is told
// about each retry before its wait.
func ChatWithRetry(ctx context.Context, m Model, req *Request, p RetryPolicy, onRetry func(n int, wait time.Duration, err error)) (*Reply, error) {
	p.defaults()
	return chatWithRetry(ctx, m, req, p, onRetry)
}

// NewFileSandbox creates a sandbox under parent ("" = the system temp dir) holding
// files (name → text; a name may have "/"-separated directories). Close removes it.
func NewFileSandbox(parent string, files map[string]string, maxToolBytes int) (*Sandbox, error) {
	dir, err := os.MkdirTemp(parent, "camproxy-learn-*")
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s, err := openSandbox(dir, maxToolBytes)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for name, text := range files {
		if err := s.WriteFile(name, text); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// WriteFile creates or replaces a file of the sandbox (the optimiser keeps
// playbook.json current as the models edit it). The name must stay inside it.
func (s *Sandbox) WriteFile(name, text string) error {
	c, err := clean(name)
	if err != nil || c == "." {
		return fmt.Errorf("sandbox: bad file name %q", name)
	}
	if d := path.Dir(c); d != "." {
		if err := s.root.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("sandbox: mkdir %s: %w", d, err)
		}
	}
	if err := s.root.WriteFile(c, []byte(text), 0o600); err != nil {
		return fmt.Errorf("sandbox: write %s: %w", c, err)
	}
	return nil
}

// RenderRun renders a run as `train reflect` shows it to its model: a "# TITLE"
// header with the reward and outcome, then every message with its tool calls and
// tool results.
func RenderRun(title string, ep *replay.Episode) string { return renderEpisode(title, ep) }

// SandboxTools are the JSON-schema descriptions of the sandbox tools (list_files,
// read_file, grep).
func SandboxTools() []ToolSpec { return toolSpecs() }

// Outcome is "success" or "failure" as the sandbox files say it (Succeeded).
func Outcome(ep *replay.Episode) string { return outcome(ep) }

// FormatReward prints a reward as the sandbox files do.
func FormatReward(r float64) string { return formatReward(r) }

// LockFile takes an exclusive, non-blocking lock on f (flock where available);
// closing f releases it. Two runs appending to one file would interleave.
func LockFile(f *os.File) error { return lockFile(f) }
