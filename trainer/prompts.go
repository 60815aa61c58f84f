package trainer

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

//go:embed prompts/system.md prompts/user.md prompts/final.md
var promptFiles embed.FS

// Placeholders replaced in the user prompt.
const (
	PlaceholderTask     = "{{task}}"      // the task text
	PlaceholderRuns     = "{{runs}}"      // one line per run file: name, reward, outcome, messages
	PlaceholderMaxSteps = "{{max_steps}}" // --max-steps
)

// Prompts are the reflection agent's instructions. They name no benchmark: the task,
// the runs and their rewards come from the replay buffer.
type Prompts struct {
	System string // the system prompt
	User   string // the first user message, with the placeholders above
	Final  string // added to the last turn: answer now, without tools
}

// DefaultPrompts are the prompts built into camproxy (trainer/prompts/*.md).
func DefaultPrompts() Prompts {
	read := func(name string) string {
		b, err := promptFiles.ReadFile("prompts/" + name)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return string(b)
	}
	return Prompts{System: read("system.md"), User: read("user.md"), Final: read("final.md")}
}

// ReadPromptFile reads a prompt override: a non-empty UTF-8 text file.
func ReadPromptFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%s is not UTF-8 text", path)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return string(b), nil
}

// Version names these prompts and the tools they describe: the first 12 hex digits
// of a SHA-256 over all of them, so that any edit, or an override, gives another
// version and the output says which prompts produced each guidance.
func (p Prompts) Version() string {
	tools, _ := json.Marshal(toolSpecs())
	h := sha256.New()
	for _, part := range []string{p.System, p.User, p.Final, string(tools)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// userMessage fills the user prompt in for a job.
func (p Prompts) userMessage(job *Job, maxSteps int) string {
	var runs strings.Builder
	for i, ep := range job.Runs {
		if i > 0 {
			runs.WriteByte('\n')
		}
		fmt.Fprintf(&runs, "- %s: reward %s (%s), %d messages", runFile(i), formatReward(*ep.Reward), outcome(ep), len(ep.Messages))
	}
	r := strings.NewReplacer(
		PlaceholderTask, strings.TrimSpace(job.Task),
		PlaceholderRuns, runs.String(),
		PlaceholderMaxSteps, strconv.Itoa(maxSteps),
	)
	return strings.TrimSpace(r.Replace(p.User))
}

// ToolSpec describes a tool to the model: a name, what it does, and a JSON schema of
// its arguments.
type ToolSpec struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Schema      map[string]any `json:"schema"`
}

func toolSpecs() []ToolSpec {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	num := func(desc string) map[string]any { return map[string]any{"type": "integer", "description": desc} }
	return []ToolSpec{
		{
			Name:        ToolListFiles,
			Description: "List the files of the sandbox with their line counts and sizes.",
			Schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		},
		{
			Name: ToolReadFile,
			Description: "Read numbered lines of a file of the sandbox, from line offset (1-based) for limit lines. " +
				"The answer says how many lines the file has and where to continue.",
			Schema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"path":   str("file name inside the sandbox, e.g. run_1.md"),
					"offset": num("first line to read, from 1 (default 1)"),
					"limit":  num(fmt.Sprintf("number of lines to read (default %d, at most %d)", defaultReadLines, maxReadLines)),
				},
				"required": []string{"path"},
			},
		},
		{
			Name: ToolGrep,
			Description: "Find the lines that match a regular expression (RE2 syntax; start it with (?i) to ignore case) " +
				"in one file or in every file, as file:line: text.",
			Schema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"pattern": str("regular expression to search for"),
					"path":    str(`file to search, or "." for every file (default ".")`),
				},
				"required": []string{"pattern"},
			},
		},
	}
}

// guidanceText takes the final answer out of a reply: reasoning (<think>…</think>)
// is dropped, and the text between <guidance> and </guidance> is kept when the tags
// are there.
func guidanceText(reply string) string {
	s := stripThink(reply)
	if i := strings.Index(s, "<guidance>"); i >= 0 {
		s = s[i+len("<guidance>"):]
		if j := strings.LastIndex(s, "</guidance>"); j >= 0 {
			s = s[:j]
		}
	}
	return strings.TrimSpace(strings.ReplaceAll(s, "</guidance>", ""))
}

// stripThink drops every <think>…</think> block, an unclosed <think> and what
// follows, and everything up to a stray </think>.
func stripThink(content string) string {
	const open, close = "<think>", "</think>"
	var b strings.Builder
	for s := content; ; {
		i := strings.Index(s, open)
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		j := strings.Index(s[i:], close)
		if j < 0 {
			break
		}
		s = s[i+j+len(close):]
	}
	out := b.String()
	if i := strings.LastIndex(out, close); i >= 0 {
		out = out[i+len(close):]
	}
	return out
}
