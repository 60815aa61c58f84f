package learn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// GuidanceOptions configure RefreshGuidance.
type GuidanceOptions struct {
	// File is the rag store (the JSON Lines `train reflect` writes and a rag
	// augmenter's guidance_file reads); new records are appended to it.
	File string
	// MaxTasks bounds the tasks reflected on per refresh; 0 = all that qualify.
	MaxTasks int
	// Sample chooses the runs each reflection compares (MixedOnly is forced on).
	Sample trainer.SampleOptions
	// Reflect is everything else about the reflection (model, prompts, retries);
	// its Out is set to File.
	Reflect trainer.Options
}

// GuidanceResult is what a refresh did.
type GuidanceResult struct {
	Qualified int // tasks with mixed outcomes and no guidance yet
	Stats     trainer.Stats
}

// RefreshGuidance keeps CLEAR's guidance fresh from live traffic: it runs
// contrastive reflection (train reflect's agent) on the tasks whose runs now have
// mixed outcomes and that have no guidance in o.File yet, and appends one record
// per task. A rag augmenter reading o.File reloads it when it changes, so the rag
// arm serves the new guidance without a restart.
func RefreshGuidance(ctx context.Context, tasks []*replay.Task, o GuidanceOptions) (GuidanceResult, error) {
	if o.File == "" {
		return GuidanceResult{}, errors.New("learn: guidance refresh: no guidance file")
	}
	have, err := guidedTasks(o.File)
	if err != nil {
		return GuidanceResult{}, fmt.Errorf("learn: guidance refresh: %w", err)
	}
	s := o.Sample
	s.MixedOnly = true
	s.Subsets = 1 // one record per task: the rag store keys guidance by task
	plan := trainer.Sample(tasks, s)
	var jobs []*trainer.Job
	for _, j := range plan.Jobs {
		if have[j.TaskID] {
			continue
		}
		jobs = append(jobs, j)
		if o.MaxTasks > 0 && len(jobs) == o.MaxTasks {
			break
		}
	}
	res := GuidanceResult{Qualified: len(jobs)}
	if len(jobs) == 0 {
		return res, nil
	}
	ro := o.Reflect
	ro.Out = o.File
	res.Stats, err = trainer.Reflect(ctx, jobs, ro)
	return res, err
}

// guidedTasks are the task ids that already have a record in file (missing = none).
func guidedTasks(file string) (map[string]bool, error) {
	out := map[string]bool{}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		id := gjson.GetBytes(sc.Bytes(), "task_id")
		switch id.Type {
		case gjson.String:
			out[id.String()] = true
		case gjson.Number:
			out[id.Raw] = true
		}
	}
	return out, sc.Err()
}
