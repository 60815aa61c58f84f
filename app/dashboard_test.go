//go:build unix

package app

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/report"
)

// TestDashboardInChromium runs camproxy with a baseline and a CAM arm and an admin
// token, sends episodes through the data plane, posts their rewards, and reads /ui in
// headless Chromium the way a person would (signed in once with ?token=): the arms with their shares, the episode count, the mean rewards
// and intervals, the cache hit rate, the breaker, the replay backlog, and a recent
// episode opened with a click. Then the CAM breaks, and the open page shows the
// breaker open on its own.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	bin := findChromium(t)
	e := newEnv(t, func(c *config.Config) {
		c.Experiment.Name = "dash"
		c.Experiment.AllowOverride = true
		c.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 3, Augmenter: "cam"}}
		ac := c.Augmenters["cam"]
		ac.Breaker.OpenFor = time.Minute // stays open while the page is read
		c.Augmenters["cam"] = ac
		c.Admin.Token = dashToken
	})

	const taskA, taskB = "Rebook flight HAT001 to the next morning.", "Cancel reservation ZFA04Y and refund to the original card."
	runs := []struct {
		arm, task string
		reward    float64
	}{
		{"cam", taskA, 1},      // CAM called
		{"baseline", taskA, 0}, //
		{"cam", taskA, 1},      // same task: from the cache
		{"cam", taskB, 0},      // CAM called
		{"baseline", taskB, 1}, //
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		a := newAgent(r.task, true)
		for range 2 {
			dashTurn(e, a, r.arm)
		}
		ids[i] = a.episode
		postReward(t, e, a.episode, r.reward)
	}
	opened := ids[3] // the cam run of task B
	// The first run belongs to another experiment (a gateway's other agent): the
	// recent episodes are grouped by experiment.
	first, err := e.app.Episodes.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	first.Experiment = "other"
	if err := e.app.Episodes.Update(context.Background(), first); err != nil {
		t.Fatal(err)
	}

	b := launchChromium(t, bin)
	// The admin token once in the address: it becomes a cookie, and leaves the address.
	b.navigate(e.admin + "/ui?refresh=1&token=" + dashToken)
	b.waitFor("both arms listed", `document.querySelectorAll("#arms tbody tr[data-arm]").length === 2 && document.getElementById("episodes").innerText === "5"`)

	if u := b.eval("location.pathname + location.search").String(); u != "/ui?refresh=1" {
		t.Errorf("the page's address is %q: the token must not stay in it", u)
	}
	camMean, camCI := meanCI(1, 1, 0)
	baseMean, baseCI := meanCI(0, 1)
	cases := []struct {
		what, selector string
		want           []string
	}{
		{"experiment", "header", []string{"dash", "fixed weights"}},
		{"episode count", "#card-episodes", []string{"5", "5 rewarded"}},
		{"cam arm", `#arms tr[data-arm="cam"]`, []string{"cam", "75.0%", "3", fmt.Sprintf("%.3f", camMean),
			fmt.Sprintf("[%.3f, %.3f]", camCI[0], camCI[1]), "active"}},
		{"baseline arm", `#arms tr[data-arm="baseline"]`, []string{"baseline", "none", "25.0%", "2", fmt.Sprintf("%.3f", baseMean),
			fmt.Sprintf("[%.3f, %.3f]", baseCI[0], baseCI[1])}},
		{"cache hit rate: 1 hit, 2 misses", "#card-cache", []string{"33.3%", "1 hit", "2 miss"}},
		{"breaker", `#augmenters tr[data-augmenter="cam"]`, []string{"cam", "closed", "2"}},
		{"replay queue", "#card-queue", []string{"events waiting in memory"}},
		{"replay spool", "#spooled", []string{"0"}},
	}
	for _, c := range cases {
		got := b.text(c.selector)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s (%s) shows %q; want %q in it", c.what, c.selector, got, w)
			}
		}
	}
	if q := b.text("#queue"); strings.Trim(q, "0123456789,") != "" {
		t.Errorf("replay queue shows %q, not a count", q)
	}

	// The recent episodes, newest first; a click opens one.
	rows := b.eval(`[...document.querySelectorAll("#recent tbody tr[data-episode]")].map(r => r.dataset.episode).join(" ")`).String()
	if want := strings.Join([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}, " "); rows != want {
		t.Fatalf("recent episodes %q, want %q", rows, want)
	}
	groups := b.eval(`[...document.querySelectorAll("#recent tbody tr.group")].map(r => r.innerText).join("|")`).String()
	if n := strings.Count(groups, "|") + 1; n != 2 || !strings.HasSuffix(groups, "Experiment other · 1 episode") {
		t.Errorf("recent episodes grouped as %q, want the others, then experiment other's one episode", groups)
	}
	if got := b.text(fmt.Sprintf(`#recent tr[data-episode=%q]`, ids[0])); !strings.Contains(got, "other") {
		t.Errorf("the other experiment's episode row shows %q, without its experiment", got)
	}
	if b.visible("#episode") {
		t.Fatal("an episode is open before any was selected")
	}
	b.click(fmt.Sprintf(`#recent tr[data-episode=%q] button`, opened))
	b.waitFor("the episode opens", `document.getElementById("ep-task").innerText.includes("ZFA04Y") && document.querySelectorAll("#ep-calls tbody tr").length === 2`)
	if !b.visible("#episode") {
		t.Fatal("the opened episode is not visible")
	}
	ep := getJSON(t, e.admin+"/v1/episodes/"+opened)
	detail := []struct {
		what, selector, want string
	}{
		{"id", "#ep-id", opened},
		{"arm", "#ep-arm", "cam"},
		{"task", "#ep-task", taskB},
		{"context", "#ep-context", ep.Get("context").String()},
		{"turns", "#ep-turns", "2"},
		{"reward", "#ep-reward", "0.000"},
		{"source", "#ep-source", "miss"},
	}
	for _, d := range detail {
		if got := strings.TrimSpace(b.text(d.selector)); got != strings.TrimSpace(d.want) {
			t.Errorf("opened episode: %s shows %q, want %q", d.what, got, d.want)
		}
	}
	if !strings.HasPrefix(ep.Get("context").String(), "Guidance for:") {
		t.Errorf("the CAM's context did not reach the episode: %s", ep.Raw)
	}
	if calls := b.text("#ep-calls tbody"); strings.Count(calls, "200") < 2 {
		t.Errorf("the two calls with status 200 are not listed: %q", calls)
	}
	if h := b.eval(`location.hash`).String(); h != "#episode="+opened {
		t.Errorf("no link to the open episode: hash %q", h)
	}
	b.click("#ep-close")
	b.waitFor("the episode closes", `document.getElementById("episode").hidden`)

	// The CAM breaks: three failed calls open the breaker, and the page, left open,
	// shows it at its next refresh.
	e.cam.SetMode(testkit.CAM500)
	for i := range 3 {
		dashTurn(e, newAgent(fmt.Sprintf("Fresh task %d: change the seat on flight HAT%03d.", i, 100+i), true), "cam")
	}
	b.waitFor("the breaker opens", `(document.querySelector('#augmenters tr[data-augmenter="cam"]') || {innerText: ""}).innerText.includes("open") && document.getElementById("episodes").innerText === "8"`)
	if got := b.text("#card-cache"); !strings.Contains(got, "3 fail-open") {
		t.Errorf("cache card after the failures: %q", got)
	}

	if p := os.Getenv("CAMPROXY_DASHBOARD_PNG"); p != "" { // a picture for a person
		b.click(fmt.Sprintf(`#recent tr[data-episode=%q] button`, opened))
		b.waitFor("reopened", `!document.getElementById("episode").hidden && document.querySelectorAll("#ep-calls tbody tr").length === 2`)
		b.screenshot(p)
	}
	b.noErrors()
}

// dashToken is the admin token of the dashboard test.
const dashToken = "dashboard-test-token-0123456789"

// dashTurn is one call of agent a, forced onto arm at its first turn.
func dashTurn(e *env, a *agent, arm string) {
	e.t.Helper()
	h := map[string]string{"X-CAM-Arm": arm}
	if a.episode != "" {
		h["X-CAM-Episode-Id"] = a.episode
	}
	resp, body := e.post(a.body(""), h)
	if resp.StatusCode != 200 || resp.Header.Get("X-CAM-Arm") != arm {
		e.t.Fatalf("turn on %s: %d arm %q: %s", arm, resp.StatusCode, resp.Header.Get("X-CAM-Arm"), body)
	}
	msg := gjson.GetBytes(body, "choices.0.message")
	a.msgs = append(a.msgs, json.RawMessage(msg.Raw))
	if calls := msg.Get("tool_calls").Array(); len(calls) > 0 {
		a.add(map[string]any{"role": "tool", "tool_call_id": calls[0].Get("id").String(), "content": `{"status":"ok"}`})
	} else {
		a.add(map[string]any{"role": "user", "content": "and then?"})
	}
	if a.episode == "" {
		a.episode = resp.Header.Get("X-CAM-Episode-Id")
	}
}

func postReward(t *testing.T, e *env, id string, r float64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.admin+"/v1/feedback", strings.NewReader(fmt.Sprintf(`{"episode_id":%q,"reward":%v}`, id, r)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+dashToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("feedback %s: %d %s", id, resp.StatusCode, body)
	}
}

func getJSON(t *testing.T, url string) gjson.Result {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+dashToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return gjson.ParseBytes(body)
}

// meanCI is the mean and 95% t interval, computed here the long way.
func meanCI(xs ...float64) (float64, [2]float64) {
	var m, ss float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	n := float64(len(xs))
	half := report.TQuantile(0.975, n-1) * math.Sqrt(ss/(n-1)/n)
	return m, [2]float64{m - half, m + half}
}

// findChromium returns the browser's path, or skips the test, or fails it when
// CAMPROXY_REQUIRE_CHROMIUM=1 (as report's screenshot test does).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
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

// chromium is headless Chromium driven over the DevTools protocol on
// --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON): no driver
// library, no port. One page, attached with a flat session.
type chromium struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File
	session string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan gjson.Result
	errs    []string // exceptions and console errors of the page
	done    chan struct{}
}

func launchChromium(t *testing.T, bin string) *chromium {
	t.Helper()
	home := t.TempDir()
	cmdIn, in, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, cmdOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--force-device-scale-factor=1", "--window-size=1280,1600", "--remote-debugging-pipe",
		"--user-data-dir="+home+"/profile", "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home+"/config", "XDG_CACHE_HOME="+home+"/cache")
	cmd.ExtraFiles = []*os.File{cmdIn, cmdOut}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmdIn.Close()
	_ = cmdOut.Close()
	b := &chromium{t: t, cmd: cmd, in: in, pending: map[int]chan gjson.Result{}, done: make(chan struct{})}
	go b.read(out)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = b.call(ctx, "Browser.close", nil, false)
		cancel()
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // and any helper it left behind
		<-waited
		_ = in.Close()
		if t.Failed() {
			var keep []string
			for _, l := range strings.Split(stderr.String(), "\n") {
				if !strings.Contains(l, "dbus") { // no system bus in a container: noise
					keep = append(keep, l)
				}
			}
			t.Logf("chromium stderr:\n%s", strings.Join(keep, "\n"))
		}
	})
	target := b.must("Target.createTarget", map[string]any{"url": "about:blank"}, false)
	b.session = b.must("Target.attachToTarget", map[string]any{"targetId": target.Get("targetId").String(), "flatten": true}, false).Get("sessionId").String()
	for _, domain := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		b.must(domain, nil, true)
	}
	return b
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// read dispatches replies to their callers and keeps the page's errors.
func (b *chromium) read(out *os.File) {
	defer close(b.done)
	defer out.Close()
	r := bufio.NewReader(out)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		m := gjson.ParseBytes(msg[:len(msg)-1])
		b.mu.Lock()
		switch {
		case m.Get("id").Exists():
			if ch, ok := b.pending[int(m.Get("id").Int())]; ok {
				ch <- m
				delete(b.pending, int(m.Get("id").Int()))
			}
		case m.Get("method").String() == "Runtime.exceptionThrown":
			b.errs = append(b.errs, "exception: "+m.Get("params.exceptionDetails.exception.description").String()+m.Get("params.exceptionDetails.text").String())
		case m.Get("method").String() == "Log.entryAdded" && m.Get("params.entry.level").String() == "error":
			b.errs = append(b.errs, m.Get("params.entry.source").String()+": "+m.Get("params.entry.text").String())
		}
		b.mu.Unlock()
	}
}

func (b *chromium) call(ctx context.Context, method string, params any, inSession bool) (gjson.Result, error) {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan gjson.Result, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if inSession {
		msg["sessionId"] = b.session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.in.Write(append(raw, 0)); err != nil {
		return gjson.Result{}, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Get("error").Exists() {
			return gjson.Result{}, fmt.Errorf("%s: %s", method, m.Get("error").Raw)
		}
		return m.Get("result"), nil
	case <-b.done:
		return gjson.Result{}, fmt.Errorf("%s: chromium exited", method)
	case <-ctx.Done():
		return gjson.Result{}, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (b *chromium) must(method string, params any, inSession bool) gjson.Result {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience(b.t))
	defer cancel()
	r, err := b.call(ctx, method, params, inSession)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *chromium) navigate(url string) {
	b.t.Helper()
	if r := b.must("Page.navigate", map[string]any{"url": url}, true); r.Get("errorText").String() != "" {
		b.t.Fatalf("navigate %s: %s", url, r.Get("errorText"))
	}
}

// eval evaluates a JavaScript expression in the page and returns its value.
func (b *chromium) eval(expr string) gjson.Result {
	b.t.Helper()
	r := b.must("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, true)
	if ex := r.Get("exceptionDetails"); ex.Exists() {
		b.t.Fatalf("evaluating %s: %s", expr, ex.Get("exception.description"))
	}
	return r.Get("result.value")
}

// waitFor polls expr until it is true, for as long as go test's -timeout allows.
func (b *chromium) waitFor(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(testkit.Patience(b.t))
	for {
		if b.eval("Boolean(" + expr + ")").Bool() {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s: %s is still false; the page reads:\n%s\npage errors: %v", what, expr, b.eval("document.body.innerText"), b.errors())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text is what the element shows (innerText: rendered text only).
func (b *chromium) text(selector string) string {
	b.t.Helper()
	v := b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : null; })()`, selector))
	if v.Type == gjson.Null {
		b.t.Fatalf("no element %s on the page", selector)
	}
	return v.String()
}

// visible: the element is rendered with a size.
func (b *chromium) visible(selector string) bool {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden"; })()`, selector)).Bool()
}

// click scrolls the element into view and clicks its centre with the mouse.
func (b *chromium) click(selector string) {
	b.t.Helper()
	pt := b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return null; e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`, selector))
	if pt.Type == gjson.Null {
		b.t.Fatalf("nothing to click at %s", selector)
	}
	x, y := pt.Get("x").Float(), pt.Get("y").Float()
	b.must("Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y}, true)
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		b.must("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1}, true)
	}
}

func (b *chromium) screenshot(path string) {
	b.t.Helper()
	data, err := base64.StdEncoding.DecodeString(b.must("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, true).Get("data").String())
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.t.Errorf("screenshot: %v", err)
	}
}

func (b *chromium) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// noErrors fails the test on any exception or console error the page had (a CSP
// violation, a failed fetch, a script error).
func (b *chromium) noErrors() {
	b.t.Helper()
	if errs := b.errors(); len(errs) > 0 {
		b.t.Errorf("the page had errors:\n%s", strings.Join(errs, "\n"))
	}
}
