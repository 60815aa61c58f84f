package learn

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/trainer"
)

//go:embed prompts/*.md
var promptFiles embed.FS

// Placeholders replaced in the user prompts.
const (
	PlaceholderPlaybook = "{{playbook}}"  // the playbook as "[entry_id] (section) content" lines
	PlaceholderBatch    = "{{batch}}"     // batch.md: the items with their files and rewards
	PlaceholderState    = "{{state}}"     // the optimizer state ("(none yet)" at the start)
	PlaceholderSummary  = "{{summary}}"   // the reflector's finish summary (mutator only)
	PlaceholderMaxTurns = "{{max_turns}}" // StepOptions.MaxTurns
)

// Prompts are the reflector's and the mutator's instructions (learn/prompts/*.md).
type Prompts struct {
	ReflectorSystem, ReflectorUser string
	MutatorSystem, MutatorUser     string
	Final                          string // added to a role's last turn: call finish now
	Nudge                          string // answers a turn without tool calls
}

// DefaultPrompts are the prompts built into camproxy.
func DefaultPrompts() Prompts {
	read := func(name string) string {
		b, err := promptFiles.ReadFile("prompts/" + name)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return strings.TrimSpace(string(b))
	}
	return Prompts{
		ReflectorSystem: read("reflector_system.md"), ReflectorUser: read("reflector_user.md"),
		MutatorSystem: read("mutator_system.md"), MutatorUser: read("mutator_user.md"),
		Final: read("final.md"), Nudge: read("nudge.md"),
	}
}

// Version names the prompts and the tools they describe: 12 hex digits of a SHA-256
// over all of them (a journal written with other prompts is another run).
func (p Prompts) Version() string {
	h := sha256.New()
	tools, _ := json.Marshal([][]trainer.ToolSpec{toolSpecs(playbook.Reflector), toolSpecs(playbook.Mutator)})
	for _, part := range []string{p.ReflectorSystem, p.ReflectorUser, p.MutatorSystem, p.MutatorUser, p.Final, p.Nudge, string(tools)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func fill(tmpl string, pb *playbook.Playbook, batch, state, summary string, maxTurns int) string {
	if strings.TrimSpace(state) == "" {
		state = "(none yet)"
	}
	if strings.TrimSpace(summary) == "" {
		summary = "(the reflector left no summary)"
	}
	r := strings.NewReplacer(
		PlaceholderPlaybook, strings.TrimSpace(pb.Lines()),
		PlaceholderBatch, strings.TrimSpace(batch),
		PlaceholderState, strings.TrimSpace(state),
		PlaceholderSummary, strings.TrimSpace(summary),
		PlaceholderMaxTurns, strconv.Itoa(maxTurns),
	)
	return strings.TrimSpace(r.Replace(tmpl))
}

// toolSpecs are a role's tools: the sandbox's, then the role's playbook tools.
func toolSpecs(role playbook.Role) []trainer.ToolSpec {
	specs := trainer.SandboxTools()
	for _, t := range playbook.Tools(role) {
		specs = append(specs, trainer.ToolSpec{Name: t.Name, Description: t.Description, Schema: t.Schema})
	}
	return specs
}
