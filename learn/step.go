package learn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// Defaults of StepOptions.
const (
	DefaultMaxTurns = 12
	// maxCallsPerTurn bounds the tool calls answered in one model turn; the rest get an
	// error (call them again next turn), so that one turn cannot flood the context.
	maxCallsPerTurn = 32
	// maxTaskRunes bounds a task's text in batch.md (and so in the prompts).
	maxTaskRunes = 2000
)

// File names in a step's sandbox.
const (
	FilePlaybook = "playbook.json"
	FileBatch    = "batch.md"
)

// ItemFile is the sandbox file of item n's (from 1) run of kind "failure" or "success".
func ItemFile(n int, kind string) string { return fmt.Sprintf("item_%d_%s.md", n, kind) }

// JournalKey is the journal key of a role's model turn (from 1) in an iteration:
// "it3/reflector/turn2".
func JournalKey(iteration int, role playbook.Role, turn int) string {
	return fmt.Sprintf("it%d/%s/turn%d", iteration, role, turn)
}

func (o *StepOptions) defaults() {
	if o.MaxTurns <= 0 {
		o.MaxTurns = DefaultMaxTurns
	}
	if o.MaxToolBytes <= 0 {
		o.MaxToolBytes = trainer.DefaultMaxToolBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Prompts == (Prompts{}) {
		o.Prompts = DefaultPrompts()
	}
}

// RenderBatch is batch.md: per item its task, the files holding its runs and their
// rewards. It also returns every file of the sandbox but playbook.json, and the
// episode ids of the batch in item order.
func RenderBatch(b Batch) (index string, files map[string]string, sources []string) {
	files = map[string]string{}
	var w strings.Builder
	fmt.Fprintf(&w, "# Batch of iteration %d: %d items\n\n", b.Iteration, len(b.Items))
	w.WriteString("Each item is one task: a failed run of it and, where there is one, a successful run of the same task (or a successful run alone).\n")
	for i, it := range b.Items {
		n := i + 1
		first := cmp.Or(it.Failure, it.Success)
		fmt.Fprintf(&w, "\n## Item %d: task %s\n\n", n, cmp.Or(first.TaskID, "(no task id)"))
		task := cmp.Or(strings.TrimSpace(first.Task), strings.TrimSpace(other(it, first).Task))
		if task == "" {
			task = "(the buffer holds no task text)"
		}
		fmt.Fprintf(&w, "task: %s\n", clipRunes(strings.Join(strings.Fields(task), " "), maxTaskRunes))
		for _, run := range []struct {
			kind string
			ep   *replay.Episode
		}{{"failure", it.Failure}, {"success", it.Success}} {
			if run.ep == nil {
				continue
			}
			name := ItemFile(n, run.kind)
			reward := "none"
			if run.ep.Reward != nil {
				reward = trainer.FormatReward(*run.ep.Reward)
			}
			fmt.Fprintf(&w, "- %s: %s, episode %s, reward %s, %d messages\n", run.kind, name, run.ep.ID, reward, len(run.ep.Messages))
			files[name] = renderRun(fmt.Sprintf("Item %d, %s run (task %s, episode %s)", n, run.kind, run.ep.TaskID, run.ep.ID), run.ep)
			sources = append(sources, run.ep.ID)
		}
		if it.Success == nil {
			w.WriteString("- success: none in the buffer for this task\n")
		}
	}
	index = w.String()
	files[FileBatch] = index
	return index, files, sources
}

func other(it Item, ep *replay.Episode) *replay.Episode {
	if ep == it.Failure && it.Success != nil {
		return it.Success
	}
	if it.Failure != nil {
		return it.Failure
	}
	return ep
}

// renderRun renders like train reflect; an episode without a reward (not expected
// in a batch) is shown with reward 0 rather than crash the renderer.
func renderRun(title string, ep *replay.Episode) string {
	if ep.Reward == nil {
		c := *ep
		zero := 0.0
		c.Reward = &zero
		ep = &c
	}
	return trainer.RenderRun(title, ep)
}

func step(ctx context.Context, m Models, base *playbook.Playbook, version int, b Batch, o StepOptions) (*StepResult, error) {
	o.defaults()
	if len(b.Items) == 0 {
		return nil, ErrNoBatch
	}
	for i, it := range b.Items {
		if it.Failure == nil && it.Success == nil {
			return nil, fmt.Errorf("learn: batch item %d has no run", i+1)
		}
	}
	if m.Reflector == nil || m.Mutator == nil {
		return nil, errors.New("learn: step needs a reflector and a mutator model")
	}
	if base == nil {
		base = &playbook.Playbook{}
	}
	index, files, sources := RenderBatch(b)
	files[FilePlaybook] = string(base.JSON())
	sb, err := trainer.NewFileSandbox(o.WorkDir, files, o.MaxToolBytes)
	if err != nil {
		return nil, fmt.Errorf("learn: %w", err)
	}
	defer sb.Close()

	ed := playbook.NewEditor(base, version, sources, o.Limits)
	res := &StepResult{Sources: sources}
	r := &roleRun{o: &o, sb: sb, ed: ed, res: res, iteration: b.Iteration}

	refl := fill(o.Prompts.ReflectorUser, ed.Playbook(), index, b.State, "", o.MaxTurns)
	if err := r.run(ctx, playbook.Reflector, m.Reflector, o.Prompts.ReflectorSystem, refl); err != nil {
		return nil, err
	}
	// The mutator sees the tags the reflector applied, in its prompt and its sandbox.
	if err := sb.WriteFile(FilePlaybook, string(ed.Playbook().JSON())); err != nil {
		return nil, fmt.Errorf("learn: %w", err)
	}
	mut := fill(o.Prompts.MutatorUser, ed.Playbook(), index, b.State, ed.Summary(playbook.Reflector), o.MaxTurns)
	if err := r.run(ctx, playbook.Mutator, m.Mutator, o.Prompts.MutatorSystem, mut); err != nil {
		return nil, err
	}
	res.Ops = ed.Ops
	res.Applied = ed.Applied()
	res.Playbook, res.Removed = ed.Finish()
	res.Summary = cmp.Or(ed.Summary(playbook.Mutator), ed.Summary(playbook.Reflector))
	return res, nil
}

// roleRun runs one role's conversation with its tools.
type roleRun struct {
	o         *StepOptions
	sb        *trainer.Sandbox
	ed        *playbook.Editor
	res       *StepResult
	iteration int
}

func (r *roleRun) run(ctx context.Context, role playbook.Role, model trainer.Model, system, user string) error {
	req := &trainer.Request{
		System:      system,
		Messages:    []trainer.Message{{Role: "user", Text: user}},
		Tools:       toolSpecs(role),
		MaxTokens:   r.o.MaxTokens,
		Temperature: r.o.Temperature,
	}
	for turn := 1; turn <= r.o.MaxTurns; turn++ {
		if turn == r.o.MaxTurns {
			last := &req.Messages[len(req.Messages)-1]
			last.Text = strings.TrimSpace(last.Text + "\n\n" + r.o.Prompts.Final)
		}
		rep, err := r.chat(ctx, role, turn, model, req)
		if err != nil {
			return err
		}
		if len(rep.Calls) == 0 {
			if turn == r.o.MaxTurns {
				break
			}
			// A text answer: ask again for tool calls. The nudge is fixed text, so a
			// resumed run rebuilds the same conversation.
			if strings.TrimSpace(rep.Text) != "" {
				req.Messages = append(req.Messages, trainer.Message{Role: "assistant", Text: rep.Text}, trainer.Message{Role: "user", Text: r.o.Prompts.Nudge})
			} else {
				last := &req.Messages[len(req.Messages)-1]
				last.Text = strings.TrimSpace(last.Text + "\n\n" + r.o.Prompts.Nudge)
			}
			continue
		}
		req.Messages = append(req.Messages, trainer.Message{Role: "assistant", Text: rep.Text, Calls: rep.Calls})
		results := make([]trainer.Result, len(rep.Calls))
		finished := false
		for i, c := range rep.Calls {
			out, done := r.call(role, c, i)
			finished = finished || done
			results[i] = trainer.Result{CallID: c.ID, Name: c.Name, Content: out}
		}
		if finished {
			return nil
		}
		req.Messages = append(req.Messages, trainer.Message{Role: "user", Results: results})
	}
	r.o.Logger.Warn("the model did not call finish", "role", role, "iteration", r.iteration, "turns", r.o.MaxTurns)
	return nil
}

// chat answers a turn from the journal, else from the model (and journals it).
func (r *roleRun) chat(ctx context.Context, role playbook.Role, turn int, model trainer.Model, req *trainer.Request) (*trainer.Reply, error) {
	key := JournalKey(r.iteration, role, turn)
	if r.o.Journal != nil {
		if rep, ok := r.o.Journal.Lookup(key); ok {
			r.res.Replayed++
			return rep, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep, err := trainer.ChatWithRetry(ctx, model, req, r.o.Retry, func(n int, wait time.Duration, err error) {
		r.o.Logger.Warn("model call failed; retrying", "role", role, "iteration", r.iteration, "turn", turn,
			"retry", n, "wait", wait.Round(time.Millisecond), "err", err)
	})
	if err != nil {
		return nil, fmt.Errorf("learn: %s turn %d of iteration %d: %w", role, turn, r.iteration, err)
	}
	r.res.Calls++
	r.res.Usage.Input += rep.Usage.Input
	r.res.Usage.Output += rep.Usage.Output
	if r.o.Journal != nil {
		if err := r.o.Journal.Record(key, rep); err != nil {
			return nil, fmt.Errorf("learn: journal %s: %w", key, err)
		}
	}
	return rep, nil
}

// call runs one tool call and returns what the model sees, and whether it was a
// finish that was applied. Every refusal is text starting with "error:".
func (r *roleRun) call(role playbook.Role, c trainer.Call, i int) (string, bool) {
	if i >= maxCallsPerTurn {
		return fmt.Sprintf("error: at most %d tool calls are answered per turn; call it again in the next turn", maxCallsPerTurn), false
	}
	if playbook.IsTool(c.Name) {
		out, err := r.ed.Apply(role, c.Name, c.Args)
		if err != nil {
			return err.Error(), false
		}
		if c.Name == playbook.ToolFinish {
			return out, true
		}
		// Keep playbook.json what the model would read now.
		if err := r.sb.WriteFile(FilePlaybook, string(r.ed.Playbook().JSON())); err != nil {
			r.o.Logger.Warn("could not refresh playbook.json in the sandbox", "err", err)
		}
		return out, false
	}
	switch c.Name {
	case trainer.ToolListFiles, trainer.ToolReadFile, trainer.ToolGrep:
		out, err := r.sb.Call(c.Name, c.Args)
		if err != nil {
			return "error: " + strings.TrimPrefix(err.Error(), trainer.ErrTool.Error()+": "), false
		}
		return out, false
	}
	names := make([]string, 0, 8)
	for _, t := range toolSpecs(role) {
		names = append(names, t.Name)
	}
	return fmt.Sprintf("error: unknown tool %q; the tools of the %s are %s", clipRunes(c.Name, 80), role, strings.Join(names, ", ")), false
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
