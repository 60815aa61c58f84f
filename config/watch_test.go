package config

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatcher: an edited file is reloaded at the next poll, a SIGHUP reloads it
// again, and a file that does not validate is refused with a log line (Apply is not
// called); with no file, a SIGHUP says there is nothing to reload.
func TestWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "camproxy.yaml")
		write := func(s string) {
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("server: {listen: \"127.0.0.1:1\"}\n")
		applied := make(chan string, 4)
		var mu sync.Mutex
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
		w := Watcher{Path: path, Getenv: func(string) (string, bool) { return "", false }, Log: log, Poll: 2 * time.Second,
			Apply: func(c *Config) error { applied <- c.Server.Listen; return nil }}
		ctx, cancel := context.WithCancel(t.Context())
		hup := make(chan os.Signal, 1)
		done := make(chan struct{})
		go func() { w.Run(ctx, Stamp(path), hup); close(done) }()

		time.Sleep(3 * time.Second) // a poll with the file as loaded: no reload
		synctest.Wait()
		if len(applied) != 0 {
			t.Fatalf("reloaded an unchanged file: %q", <-applied)
		}
		write("server: {listen: \"127.0.0.1:22\"}\n")
		if got := <-applied; got != "127.0.0.1:22" {
			t.Fatalf("after an edit: %q", got)
		}
		time.Sleep(5 * time.Second) // more polls: the edit is loaded once
		synctest.Wait()
		if len(applied) != 0 {
			t.Fatalf("reloaded an edit again: %q", <-applied)
		}
		hup <- os.Interrupt
		if got := <-applied; got != "127.0.0.1:22" {
			t.Fatalf("after SIGHUP: %q", got)
		}
		write("server: {listn: \"x\"}\n")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if len(applied) != 0 {
			t.Fatalf("applied a config that does not load: %q", <-applied)
		}
		mu.Lock()
		refused := strings.Contains(logs.String(), "config reload refused")
		mu.Unlock()
		if !refused {
			t.Errorf("no log line for the refused file:\n%s", logs.String())
		}
		cancel()
		<-done

		logs.Reset()
		none := Watcher{Log: log, Poll: time.Second, Apply: func(*Config) error { t.Error("applied with no file"); return nil }}
		ctx, cancel = context.WithCancel(t.Context())
		done = make(chan struct{})
		go func() { none.Run(ctx, "", hup); close(done) }()
		hup <- os.Interrupt
		time.Sleep(2 * time.Second)
		synctest.Wait()
		cancel()
		<-done
		if !strings.Contains(logs.String(), "no config file to reload") {
			t.Errorf("SIGHUP without a file:\n%s", logs.String())
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
