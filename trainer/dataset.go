package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/internal/fsx"
	"github.com/camproxy/camproxy/replay"
)

// Prompter renders the CAM's chat for a task. The serving side's cam augmenter
// (augment.CAM) is one: training files are built from the very prompt camproxy
// sends at serving time, so the two cannot drift.
type Prompter interface {
	Prompt(task string) (system, user string)
}

// Example is one task of a training set: its text and, for SFT, the guidance
// reflection wrote for it.
type Example struct {
	TaskID, Task, Guidance string
}

// ReadRecords reads a reflect output file. Lines that are not records, and a torn
// last line, are counted in skipped rather than failing the read: the file is
// append-only and a killed run leaves at most one such line.
func ReadRecords(path string) (recs []Record, skipped int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Record
		if json.Unmarshal(line, &r) != nil || r.TaskID == "" || strings.TrimSpace(r.Guidance) == "" || r.TaskDescription == "" {
			skipped++
			continue
		}
		recs = append(recs, r)
	}
	return recs, skipped, sc.Err()
}

// RecordExamples turns reflect records into SFT examples, one per record: a task
// reflected on several times gives several guidance texts, all of them targets.
func RecordExamples(recs []Record) []Example {
	out := make([]Example, 0, len(recs))
	for _, r := range recs {
		out = append(out, Example{TaskID: r.TaskID, Task: r.TaskDescription, Guidance: strings.TrimSpace(r.Guidance)})
	}
	return out
}

// TaskExamples are the examples of the tasks of a replay buffer that have an id and a
// task text (GRPO's tasks; no guidance).
func TaskExamples(tasks []*replay.Task) []Example {
	var out []Example
	for _, t := range tasks {
		if t.ID != "" && strings.TrimSpace(t.Text) != "" {
			out = append(out, Example{TaskID: t.ID, Task: t.Text})
		}
	}
	return out
}

// UniqueTasks keeps the first example of each task id, in order: GRPO needs each
// task once, whatever number of guidance texts it has.
func UniqueTasks(exs []Example) []Example {
	seen := map[string]bool{}
	var out []Example
	for _, e := range exs {
		if !seen[e.TaskID] {
			seen[e.TaskID] = true
			out = append(out, Example{TaskID: e.TaskID, Task: e.Task})
		}
	}
	return out
}

// SplitByTask draws the validation tasks: round(frac × tasks) of the distinct task
// ids, at least one when frac > 0 and there are two tasks or more, never all of them.
// The draw depends only on the set of ids and the seed, so the same buffer and seed
// give the same split for SFT, GRPO and DPO. Whole tasks go to one side: a task in
// both would let validation score memorised guidance.
func SplitByTask(ids []string, frac float64, seed int64) map[string]bool {
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	n := int(math.Round(frac * float64(len(uniq))))
	if frac > 0 && n == 0 && len(uniq) >= 2 {
		n = 1
	}
	if n >= len(uniq) {
		n = len(uniq) - 1
	}
	val := map[string]bool{}
	if n <= 0 {
		return val
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x63616d7072787921)) // "camprxy!"
	r.Shuffle(len(uniq), func(i, j int) { uniq[i], uniq[j] = uniq[j], uniq[i] })
	for _, id := range uniq[:n] {
		val[id] = true
	}
	return val
}

// Split is an example set divided by task.
type Split struct {
	Train, Val []Example
}

// SplitExamples splits exs with SplitByTask, keeping their order on each side.
func SplitExamples(exs []Example, frac float64, seed int64) Split {
	ids := make([]string, len(exs))
	for i, e := range exs {
		ids[i] = e.TaskID
	}
	val := SplitByTask(ids, frac, seed)
	var s Split
	for _, e := range exs {
		if val[e.TaskID] {
			s.Val = append(s.Val, e)
		} else {
			s.Train = append(s.Train, e)
		}
	}
	return s
}

// TaskCount is the number of distinct tasks in exs.
func TaskCount(exs []Example) int {
	seen := map[string]bool{}
	for _, e := range exs {
		seen[e.TaskID] = true
	}
	return len(seen)
}

// ErrOutNotDir is returned when --out names something that is not a directory.
var ErrOutNotDir = errors.New("not a directory")

// prepareOut makes the output directory (and its parents).
func prepareOut(dir string) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s: %w", dir, ErrOutNotDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// writeFile writes data to dir/name through a temporary file and a rename, so
// that a crash never leaves a half-written file that a trainer would read.
func writeFile(dir, name string, data []byte, mode os.FileMode) error {
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return fsx.WriteFile(path, mode, func(w io.Writer) error {
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	})
}

// marshalJSON encodes v indented, without HTML escaping (prompts hold < and &).
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileSet writes the files of one output directory, stopping at the first error.
type fileSet struct {
	dir   string
	files []string // written, relative to dir
	err   error
}

func (f *fileSet) write(name string, data []byte, mode os.FileMode) {
	if f.err != nil {
		return
	}
	if f.err = writeFile(f.dir, name, data, mode); f.err == nil {
		f.files = append(f.files, name)
	}
}

func (f *fileSet) json(name string, v any) {
	data, err := marshalJSON(v)
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("encode %s: %w", name, err)
	}
	f.write(name, data, 0o644)
}
