package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/replay"
)

// Tool names the reflection agent may call.
const (
	ToolListFiles = "list_files"
	ToolReadFile  = "read_file"
	ToolGrep      = "grep"
)

// Sandbox limits.
const (
	DefaultMaxToolBytes = 16 << 10 // a tool result is cut here
	defaultReadLines    = 200      // read_file without a limit
	maxReadLines        = 2000     // read_file's limit at most
	maxLineBytes        = 2000     // a longer line is cut in read_file output
	grepLineBytes       = 300      // a matching line is shown in a window this wide
	maxGrepMatches      = 100
	maxPatternBytes     = 1000
	maxPathBytes        = 4096
)

// ErrTool is wrapped by every error a tool returns to the model (a refused path, a
// missing file, bad arguments): the model sees the message and may try again.
var ErrTool = errors.New("tool error")

func toolErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrTool, fmt.Sprintf(format, a...))
}

// Sandbox is a fresh directory holding one job's runs as files, and the only files
// the reflection agent's tools can reach: no path may leave it, through "..", an
// absolute path or a symlink.
type Sandbox struct {
	dir      string
	root     *os.Root
	maxBytes int
}

// NewSandbox creates a directory under parent ("" = the system temp dir) and writes
// task.md and run_1.md… for the job. Close removes it.
func NewSandbox(parent string, job *Job, maxToolBytes int) (*Sandbox, error) {
	dir, err := os.MkdirTemp(parent, "camproxy-reflect-*")
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s, err := openSandbox(dir, maxToolBytes)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	files := map[string]string{"task.md": renderTask(job)}
	for i, ep := range job.Runs {
		files[runFile(i)] = renderRun(i, ep)
	}
	for name, text := range files {
		if err := s.root.WriteFile(name, []byte(text), 0o600); err != nil {
			s.Close()
			return nil, fmt.Errorf("sandbox: write %s: %w", name, err)
		}
	}
	return s, nil
}

// openSandbox serves the tools over an existing directory (tests, fuzzing).
func openSandbox(dir string, maxToolBytes int) (*Sandbox, error) {
	if maxToolBytes <= 0 {
		maxToolBytes = DefaultMaxToolBytes
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return &Sandbox{dir: dir, root: root, maxBytes: maxToolBytes}, nil
}

// Dir is the sandbox's directory.
func (s *Sandbox) Dir() string { return s.dir }

// Close removes the sandbox and everything in it.
func (s *Sandbox) Close() error {
	s.root.Close()
	return os.RemoveAll(s.dir)
}

func runFile(i int) string { return "run_" + strconv.Itoa(i+1) + ".md" }

// outcome is how a run's result is shown: the reward, and the success flag when the
// harness gave one (else reward ≥ 1).
func outcome(ep *replay.Episode) string {
	if Succeeded(ep) {
		return "success"
	}
	return "failure"
}

func formatReward(r float64) string { return strconv.FormatFloat(r, 'g', 6, 64) }

func renderTask(job *Job) string {
	var b strings.Builder
	b.WriteString("# Task\n\n")
	b.WriteString(strings.TrimSpace(job.Task))
	b.WriteString("\n\n# Runs of this task\n\n| file | reward | outcome | messages |\n| --- | --- | --- | --- |\n")
	for i, ep := range job.Runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %d |\n", runFile(i), formatReward(*ep.Reward), outcome(ep), len(ep.Messages))
	}
	return b.String()
}

// renderRun writes one run as markdown: the reward first, then every message with
// its tool calls and results; JSON arguments and results are indented so that lines
// stay short and grep finds fields.
func renderRun(i int, ep *replay.Episode) string {
	return renderEpisode("Run "+strconv.Itoa(i+1), ep)
}

func renderEpisode(title string, ep *replay.Episode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nreward: %s\noutcome: %s\nmessages: %d\n", title, formatReward(*ep.Reward), outcome(ep), len(ep.Messages))
	for n, m := range ep.Messages {
		role := m.Role
		if role == "" {
			role = "unknown"
		}
		switch {
		case role == "tool":
			fmt.Fprintf(&b, "\n## message %d: tool result", n+1)
			if m.Name != "" {
				fmt.Fprintf(&b, " of %s", m.Name)
			}
			if m.ToolCallID != "" {
				fmt.Fprintf(&b, " (call %s)", m.ToolCallID)
			}
			b.WriteString("\n\n")
		default:
			fmt.Fprintf(&b, "\n## message %d: %s\n\n", n+1, role)
		}
		c := strings.TrimSpace(m.Content)
		if c != "" {
			b.WriteString(readableJSON(c))
			b.WriteString("\n")
		} else if len(m.ToolCalls) == 0 {
			b.WriteString("(empty)\n")
		}
		for i, tc := range m.ToolCalls {
			if c != "" || i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "tool call: %s (call %s)\n", tc.Name, tc.ID)
			if a := strings.TrimSpace(tc.Arguments); a != "" {
				b.WriteString(readableJSON(a))
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// readableJSON indents a JSON object or array; any other text is returned as is.
func readableJSON(s string) string {
	if s[0] != '{' && s[0] != '[' || !json.Valid([]byte(s)) {
		return s
	}
	var out bytes.Buffer
	if json.Indent(&out, []byte(s), "", "  ") != nil {
		return s
	}
	return out.String()
}

// Call runs one tool with its JSON arguments. An error wrapping ErrTool is meant
// for the model; the caller sends it back as the tool's result.
func (s *Sandbox) Call(name, args string) (string, error) {
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	if !gjson.Valid(args) || !gjson.Parse(args).IsObject() {
		return "", toolErr("the arguments must be a JSON object, got %s", clip(args, 200))
	}
	a := gjson.Parse(args)
	switch name {
	case ToolListFiles:
		return s.ListFiles()
	case ToolReadFile:
		return s.ReadFile(a.Get("path").String(), int(a.Get("offset").Int()), int(a.Get("limit").Int()))
	case ToolGrep:
		return s.Grep(a.Get("pattern").String(), a.Get("path").String())
	default:
		return "", toolErr("unknown tool %q; the tools are list_files, read_file and grep", clip(name, 100))
	}
}

// clean checks a path the model gave and returns it in slash form relative to the
// sandbox ("." for the sandbox itself). It refuses what could leave the sandbox:
// absolute paths, any ".." component, NUL bytes and backslashes. Symlinks are
// refused when the path is opened (see lstatChain).
func clean(p string) (string, error) {
	switch {
	case len(p) > maxPathBytes:
		return "", toolErr("the path is too long")
	case strings.ContainsRune(p, 0):
		return "", toolErr("the path holds a NUL byte")
	case strings.ContainsRune(p, '\\'):
		return "", toolErr("use / to separate path components, not \\")
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p) || filepath.VolumeName(p) != "":
		return "", toolErr("absolute paths are refused: give a path inside the sandbox, such as run_1.md")
	case p == "" || p == ".":
		return ".", nil
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", toolErr("%q leaves the sandbox: \"..\" is refused; give a path inside the sandbox, such as run_1.md", clip(p, 200))
		}
	}
	c := path.Clean(p)
	if !filepath.IsLocal(filepath.FromSlash(c)) && c != "." {
		return "", toolErr("%q is not a path inside the sandbox", clip(p, 200))
	}
	return c, nil
}

// lstatChain refuses a path any component of which is a symlink (a symlink inside
// the sandbox could point anywhere) and returns the last component's info.
func (s *Sandbox) lstatChain(p string) (fs.FileInfo, error) {
	if p == "." {
		return s.root.Lstat(".")
	}
	parts := strings.Split(p, "/")
	var fi fs.FileInfo
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		var err error
		fi, err = s.root.Lstat(sub)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, toolErr("%s does not exist; list_files shows the files", clip(p, 200))
			}
			return nil, toolErr("cannot read %s", clip(p, 200))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, toolErr("%s is a symbolic link; links are refused in the sandbox", clip(sub, 200))
		}
	}
	return fi, nil
}

// open opens a regular file of the sandbox for reading.
func (s *Sandbox) open(p string) (*os.File, string, error) {
	c, err := clean(p)
	if err != nil {
		return nil, "", err
	}
	if c == "." {
		return nil, "", toolErr("give a file name, such as run_1.md")
	}
	fi, err := s.lstatChain(c)
	if err != nil {
		return nil, "", err
	}
	if fi.IsDir() {
		return nil, "", toolErr("%s is a directory; list_files shows the files", c)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", toolErr("%s is not a regular file", c)
	}
	f, err := s.root.Open(c) // os.Root: whatever changed since, it cannot leave the directory
	if err != nil {
		return nil, "", toolErr("cannot open %s", c)
	}
	// The file opened must be the one checked: a swap for a link in between is refused.
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) {
		f.Close()
		return nil, "", toolErr("%s changed while being opened", c)
	}
	return f, c, nil
}

// ListFiles lists the sandbox's regular files with their sizes and line counts.
func (s *Sandbox) ListFiles() (string, error) {
	type entry struct {
		name         string
		bytes, lines int
	}
	var files []entry
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil // links and special files are not listed
		}
		data, err := s.root.ReadFile(p)
		if err != nil {
			return nil
		}
		files = append(files, entry{p, len(data), countLines(data)})
		return nil
	})
	if err != nil {
		return "", toolErr("cannot list the sandbox")
	}
	slices.SortFunc(files, func(a, b entry) int {
		if (a.name == "task.md") != (b.name == "task.md") {
			if a.name == "task.md" {
				return -1
			}
			return 1
		}
		return compareNatural(a.name, b.name)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d files:\n", len(files))
	for _, f := range files {
		fmt.Fprintf(&b, "%s  %d lines  %d bytes\n", f.name, f.lines, f.bytes)
	}
	return s.fit(b.String()), nil
}

func countLines(data []byte) int {
	if len(data) == 0 {
		return 0
	}
	n := bytes.Count(data, []byte{'\n'})
	if data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// ReadFile returns limit lines of a file from line offset (1-based), numbered.
// offset < 1 reads from the start; limit < 1 reads defaultReadLines.
func (s *Sandbox) ReadFile(p string, offset, limit int) (string, error) {
	f, c, err := s.open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if offset < 1 {
		offset = 1
	}
	if limit < 1 {
		limit = defaultReadLines
	}
	limit = min(limit, maxReadLines)
	sc := bufio.NewReader(f)
	var body strings.Builder
	total, last := 0, 0
	cut := false
	for {
		line, err := sc.ReadString('\n')
		if line == "" && err != nil {
			break
		}
		total++
		if total >= offset && total < offset+limit && !cut {
			l := strings.TrimRight(line, "\n")
			if len(l) > maxLineBytes {
				l = clip(l, maxLineBytes) + fmt.Sprintf(" … [line cut: %d bytes in all]", len(l))
			}
			row := fmt.Sprintf("%6d  %s\n", total, l)
			if body.Len()+len(row) > s.maxBytes-200 && last >= offset {
				cut = true
				continue
			}
			body.WriteString(row)
			last = total
		}
		if err != nil {
			break
		}
	}
	if offset > total {
		return "", toolErr("%s has %d lines; offset %d is past the end", c, total, offset)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, lines %d-%d of %d:\n", c, offset, last, total)
	b.WriteString(body.String())
	if last < total {
		fmt.Fprintf(&b, "[%d more lines: read_file with offset %d]\n", total-last, last+1)
	}
	return s.fit(b.String()), nil
}

// Grep returns the lines of a file, or of every file under a directory, that match a
// regular expression (RE2 syntax), as file:line: text.
func (s *Sandbox) Grep(pattern, p string) (string, error) {
	if pattern == "" {
		return "", toolErr("give a pattern")
	}
	if len(pattern) > maxPatternBytes {
		return "", toolErr("the pattern is longer than %d bytes", maxPatternBytes)
	}
	re, err := regexp.Compile(pattern)
	note := ""
	if err != nil {
		re = regexp.MustCompile(regexp.QuoteMeta(pattern))
		note = "(not a valid regular expression, searched as plain text) "
	}
	c, err := clean(p)
	if err != nil {
		return "", err
	}
	fi, err := s.lstatChain(c)
	if err != nil {
		return "", err
	}
	var names []string
	if fi.IsDir() {
		sub, err := fs.Sub(s.root.FS(), c)
		if err != nil {
			return "", toolErr("cannot search %s", c)
		}
		_ = fs.WalkDir(sub, ".", func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				names = append(names, path.Join(c, q))
			}
			return nil
		})
		slices.SortFunc(names, compareNatural)
	} else {
		names = []string{c}
	}
	var b strings.Builder
	matches := 0
	full := false
	for _, name := range names {
		if full {
			break
		}
		f, c, err := s.open(name)
		if err != nil {
			if len(names) == 1 {
				return "", err
			}
			continue
		}
		rd := bufio.NewReader(f)
		for n := 1; ; n++ {
			line, err := rd.ReadString('\n')
			if line == "" && err != nil {
				break
			}
			line = strings.TrimRight(line, "\n")
			if loc := re.FindStringIndex(line); loc != nil {
				row := fmt.Sprintf("%s:%d: %s\n", c, n, window(line, loc[0]))
				if matches == maxGrepMatches || b.Len()+len(row) > s.maxBytes-200 {
					full = true
					break
				}
				matches++
				b.WriteString(row)
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	if matches == 0 && !full {
		return note + fmt.Sprintf("no line matches %q in %s", clip(pattern, 200), c), nil
	}
	noun := "lines match"
	if matches == 1 {
		noun = "line matches"
	}
	out := fmt.Sprintf("%s%d %s %q in %s:\n", note, matches, noun, clip(pattern, 200), c) + b.String()
	if full {
		out += "[stopped early: narrow the pattern or the path, or read_file around a match]\n"
	}
	return s.fit(out), nil
}

// window shows a long line around a match.
func window(line string, at int) string {
	if len(line) <= grepLineBytes {
		return line
	}
	start := max(0, at-grepLineBytes/3)
	for start > 0 && !utf8.RuneStart(line[start]) {
		start--
	}
	out := clip(line[start:], grepLineBytes)
	if start > 0 {
		out = "…" + out
	}
	if start+len(out) < len(line) {
		out += "…"
	}
	return out
}

// fit cuts a tool result to the sandbox's byte limit.
func (s *Sandbox) fit(out string) string {
	if len(out) <= s.maxBytes {
		return out
	}
	return clip(out, s.maxBytes-80) + "\n[output cut at the size limit; ask for less]\n"
}

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var _ io.Closer = (*Sandbox)(nil)
