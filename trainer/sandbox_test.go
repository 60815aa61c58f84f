package trainer

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const secret = "TOP-SECRET-OUTSIDE-THE-SANDBOX"

// miniJob is a task with two short runs, one of which calls a tool.
func miniJob() *Job {
	one, zero := 1.0, 0.0
	yes, no := true, false
	runs := []*replay.Episode{
		{ID: "ep-a", TaskID: "t1", Reward: &one, Success: &yes, Messages: []protocol.Message{
			{Role: "system", Content: "You are a support agent. Follow the policy."},
			{Role: "user", Content: "Please change my booking ABC123 to Friday."},
			{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_1", Type: "function", Name: "get_booking", Arguments: `{"booking_id":"ABC123"}`}}},
			{Role: "tool", ToolCallID: "call_1", Name: "get_booking", Content: `{"booking_id":"ABC123","day":"Thursday","fare":"flexible"}`},
			{Role: "assistant", Content: "Your fare is flexible; I moved the booking to Friday."},
		}},
		{ID: "ep-b", TaskID: "t1", Reward: &zero, Success: &no, Messages: []protocol.Message{
			{Role: "system", Content: "You are a support agent. Follow the policy."},
			{Role: "user", Content: "Please change my booking ABC123 to Friday."},
			{Role: "assistant", Content: "Done, it is Friday now."},
		}},
	}
	j := &Job{TaskID: "t1", Task: "Change booking ABC123 to Friday.", Runs: runs, Mixed: true}
	j.Key = JobKey(j.TaskID, j.Episodes())
	return j
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("%s differs from the golden file:\n%s", name, got)
	}
}

func TestSandboxFiles(t *testing.T) {
	sb, err := NewSandbox(t.TempDir(), miniJob(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	for _, name := range []string{"task.md", "run_1.md", "run_2.md"} {
		data, err := os.ReadFile(filepath.Join(sb.Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "sandbox_"+name, string(data))
	}
	list, err := sb.ListFiles()
	if err != nil || !strings.HasPrefix(list, "3 files:\ntask.md  ") || !strings.Contains(list, "\nrun_2.md  ") {
		t.Fatalf("list_files: %q, %v", list, err)
	}
	// Close removes the directory.
	dir := sb.Dir()
	sb.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("sandbox left behind: %v", err)
	}
}

func TestSandboxReadAndGrep(t *testing.T) {
	sb, err := NewSandbox(t.TempDir(), miniJob(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	out, err := sb.ReadFile("run_1.md", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := "run_1.md, lines 3-4 of 32:\n     3  reward: 1\n     4  outcome: success\n[28 more lines: read_file with offset 5]\n"
	if out != want {
		t.Fatalf("read_file:\n%q\nwant\n%q", out, want)
	}
	if out, _ = sb.ReadFile("./run_2.md", 0, 0); !strings.Contains(out, "lines 1-") || strings.Contains(out, "more lines") {
		t.Fatalf("whole file: %q", out)
	}
	if _, err := sb.ReadFile("run_1.md", 1000, 5); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Fatalf("past the end: %v", err)
	}
	out, err = sb.Grep(`"fare"`, ".")
	if err != nil || !strings.Contains(out, `run_1.md:27:   "fare": "flexible"`) {
		t.Fatalf("grep: %q %v", out, err)
	}
	if out, _ = sb.Grep("(?i)REWARD:", "."); !strings.Contains(out, "2 lines match") {
		t.Fatalf("grep (?i): %q", out)
	}
	if out, _ = sb.Grep("booking(", "run_2.md"); !strings.Contains(out, "searched as plain text") && !strings.Contains(out, "no line matches") {
		t.Fatalf("bad regexp: %q", out)
	}
	if out, _ = sb.Grep("nowhere-to-be-found", ""); !strings.HasPrefix(out, "no line matches") {
		t.Fatalf("no match: %q", out)
	}
	if _, err := sb.Call("rm_rf", `{}`); err == nil || !errors.Is(err, ErrTool) {
		t.Fatalf("unknown tool: %v", err)
	}
	if _, err := sb.Call(ToolReadFile, `{"path":`); err == nil {
		t.Fatal("bad JSON accepted")
	}
	if out, err := sb.Call(ToolReadFile, `{"path":"task.md","offset":"1","limit":"3"}`); err != nil || !strings.Contains(out, "lines 1-3") {
		t.Fatalf("numbers as strings: %q %v", out, err)
	}
}

func TestSandboxOutputCapped(t *testing.T) {
	j := miniJob()
	long := strings.Repeat("x", 50_000)
	for range 200 {
		j.Runs[0].Messages = append(j.Runs[0].Messages, protocol.Message{Role: "user", Content: "line with a marker " + long[:500]})
	}
	j.Runs[0].Messages = append(j.Runs[0].Messages, protocol.Message{Role: "tool", Content: "marker " + long})
	sb, err := NewSandbox(t.TempDir(), j, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	for _, out := range []string{
		must(sb.ReadFile("run_1.md", 1, 2000)),
		must(sb.Grep("marker", ".")),
		must(sb.ReadFile("run_1.md", 800, 10)),
	} {
		if len(out) > 4096 {
			t.Fatalf("tool output of %d bytes over the 4096 cap", len(out))
		}
	}
	if out := must(sb.ReadFile("run_1.md", 1, 2000)); !strings.Contains(out, "more lines: read_file with offset") {
		t.Fatalf("a cut read says where to go on: %q", out[len(out)-200:])
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// plantEscapes puts, next to the sandbox, a file holding the secret, and in the
// sandbox links to it and to its directory.
func plantEscapes(t testing.TB, dir string) {
	t.Helper()
	outside := filepath.Dir(dir)
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"evil.md":   filepath.Join(outside, "secret.txt"),
		"linkdir":   outside,
		"inside.md": "run_1.md", // even a link that stays inside is refused
		"passwd":    "/etc/passwd",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSandboxEscapesRefused(t *testing.T) {
	sb, err := NewSandbox(t.TempDir(), miniJob(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	plantEscapes(t, sb.Dir())
	for _, p := range []string{
		"../../etc/passwd", "/etc/passwd", "../secret.txt", "run_1.md/../../secret.txt", "..", "./../secret.txt",
		"evil.md", "linkdir/secret.txt", "inside.md", "passwd", "linkdir", `..\secret.txt`, "a\x00b",
		"//etc/passwd", "C:/Windows/win.ini",
	} {
		out, err := sb.ReadFile(p, 0, 0)
		if err == nil || !errors.Is(err, ErrTool) {
			t.Errorf("read_file(%q) = %q, %v: want a tool error", p, out, err)
		}
		if strings.Contains(out, secret) || strings.Contains(out, "root:") || err != nil && strings.Contains(err.Error(), sb.Dir()) {
			t.Errorf("read_file(%q) leaked: %q %v", p, out, err)
		}
		gout, gerr := sb.Grep(".", p)
		if strings.Contains(gout, secret) || strings.Contains(gout, "root:") {
			t.Errorf("grep(., %q) leaked: %q", p, gout)
		}
		if p != "linkdir" && gerr == nil {
			t.Errorf("grep(., %q) = %q: want a tool error", p, gout)
		}
	}
	// Searching everything skips the links, and listing does not show them.
	if out, _ := sb.Grep("SECRET|root:", "."); !strings.HasPrefix(out, "no line matches") {
		t.Fatalf("grep . followed a link: %q", out)
	}
	if out, _ := sb.ListFiles(); strings.Contains(out, "evil") || strings.Contains(out, "linkdir") || !strings.HasPrefix(out, "3 files:") {
		t.Fatalf("list_files: %q", out)
	}
	_, err = sb.ReadFile("evil.md", 0, 0)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("link: %v", err)
	}
	_, err = sb.ReadFile("../../etc/passwd", 0, 0)
	if err == nil || !strings.Contains(err.Error(), `".." is refused`) {
		t.Fatalf("dot-dot: %v", err)
	}
	_, err = sb.ReadFile("/etc/passwd", 0, 0)
	if err == nil || !strings.Contains(err.Error(), "absolute paths are refused") {
		t.Fatalf("absolute: %v", err)
	}
}

// FuzzSandboxPath: whatever path the model gives, read_file and grep never return
// what lies outside the sandbox, and an accepted path stays inside it.
func FuzzSandboxPath(f *testing.F) {
	for _, p := range []string{
		"run_1.md", "./run_1.md", "task.md", ".", "", "..", "../secret.txt", "../../etc/passwd", "/etc/passwd",
		"evil.md", "linkdir/secret.txt", "sub/../../secret.txt", "run_1.md/..", "a/./b", "sub//x", "…/x",
		"\x00", "%2e%2e/secret.txt", "linkdir", "sub/inner.md", "sub/evil",
	} {
		f.Add(p)
	}
	base := f.TempDir()
	dir := filepath.Join(base, "sandbox")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		f.Fatal(err)
	}
	for name, text := range map[string]string{"run_1.md": "reward: 1\nhello\n", "task.md": "# Task\n", "sub/inner.md": "inner\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	plantEscapes(f, dir)
	if err := os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(dir, "sub", "evil")); err != nil {
		f.Fatal(err)
	}
	sb, err := openSandbox(dir, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if c, err := clean(p); err == nil {
			abs := filepath.Join(dir, filepath.FromSlash(c))
			if rel, err := filepath.Rel(dir, abs); err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
				t.Fatalf("clean(%q) = %q, outside the sandbox", p, c)
			}
		}
		outs := []string{}
		if out, err := sb.ReadFile(p, 0, 0); err == nil {
			outs = append(outs, out)
		} else {
			outs = append(outs, err.Error())
		}
		for _, pat := range []string{".", "SECRET"} {
			if out, err := sb.Grep(pat, p); err == nil {
				outs = append(outs, out)
			} else {
				outs = append(outs, err.Error())
			}
		}
		if out, err := sb.Call(ToolReadFile, `{"path":`+jsonString(p)+`}`); err == nil {
			outs = append(outs, out)
		}
		for _, out := range outs {
			if strings.Contains(out, secret) || strings.Contains(out, "root:x:") {
				t.Fatalf("path %q reached outside the sandbox: %q", p, out)
			}
		}
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
