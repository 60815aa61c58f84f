package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestDevUpstreamCommand runs `camproxy dev upstream` as the CLI does: it says where
// it listens, answers there, and stops when the context ends.
func TestDevUpstreamCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "upstream", "--listen", "127.0.0.1:0"}, pw, io.Discard, func(string) (string, bool) { return "", false })
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
	if addr == "" {
		t.Fatalf("no address in %q", line)
	}
	resp, err := http.Post(addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte("I see 0 characters of task context.")) {
		t.Errorf("answer %s", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("dev upstream after cancel: %v", err)
	}
}

func TestDevUsage(t *testing.T) {
	noenv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"dev"}, "want a command: upstream"},
		{[]string{"dev", "downstream"}, `unknown command "downstream": want upstream`},
		{[]string{"dev", "upstrem"}, `did you mean "upstream"?`},
		{[]string{"dev", "upstream", "extra"}, `unexpected argument "extra"`},
		{[]string{"dev", "upstream", "--port", "1"}, "unknown flag --port"},
		{[]string{"dev", "upstream", "--lisen", "1"}, "unknown flag --lisen; did you mean --listen?"},
		{[]string{"dev", "upstream", "--listen", "256.0.0.1:1"}, "dev upstream:"},
		{[]string{"dev", "--help"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, io.Discard, noenv)
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(stdout.String(), "camproxy dev upstream") {
					t.Errorf("err %v, help %q", err, stdout.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
