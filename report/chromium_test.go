//go:build unix

package report

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// chromiumNames are the names Chromium's binary goes by (Debian's package installs
// "chromium").
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findChromium returns the browser's path, or skips the test, or fails it when
// CAMPROXY_REQUIRE_CHROMIUM=1.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "headless Chromium not found (looked for chromium, chromium-browser, google-chrome); scripts/test-deps.sh installs it"
	if os.Getenv("CAMPROXY_REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg + ", and CAMPROXY_REQUIRE_CHROMIUM=1")
	}
	t.Skip(msg)
	return ""
}

// screenshot renders the page at htmlPath into pngPath with headless Chromium at a
// w × h window, one CSS pixel a device pixel. The browser gets a throwaway profile
// and home, no network beyond the file, and its whole process group is killed when
// it is done or after a minute.
func screenshot(t *testing.T, htmlPath, pngPath string, w, h int) {
	t.Helper()
	bin := findChromium(t)
	home, err := os.MkdirTemp("", "camproxy-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home) // best effort: a straggler may still hold a file

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
		"--user-data-dir="+home+"/profile", "--screenshot="+pngPath,
		"--window-size="+strconv.Itoa(w)+","+strconv.Itoa(h), "file://"+htmlPath)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home+"/config", "XDG_CACHE_HOME="+home+"/cache")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers it left behind, if any
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("chromium did not finish in a minute:\n%s", out)
		}
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if st, err := os.Stat(pngPath); err != nil || st.Size() == 0 {
		t.Fatalf("chromium wrote no screenshot (%v):\n%s", err, out)
	}
}
