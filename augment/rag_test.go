package augment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/camproxy/camproxy/internal/testkit"
)

// tauBench is the real trajectory file of the shared data (DESIGN.md, Data).
const tauBench = "../../shared/data/tau-bench/gpt-4o-airline.json"

type tauTask struct {
	ID          int
	Instruction string
}

// tauTasks returns the distinct tasks of the tau-bench airline file, in order.
func tauTasks(t *testing.T) []tauTask {
	t.Helper()
	raw, err := os.ReadFile(tauBench)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("skipping: the tau-bench data is not at %s (see DESIGN.md, Data)", tauBench)
	}
	if err != nil {
		t.Fatal(err)
	}
	var runs []struct {
		TaskID int `json:"task_id"`
		Info   struct {
			Task struct {
				Instruction string `json:"instruction"`
			} `json:"task"`
		} `json:"info"`
	}
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	var tasks []tauTask
	seen := map[int]bool{}
	for _, r := range runs {
		if !seen[r.TaskID] {
			seen[r.TaskID] = true
			tasks = append(tasks, tauTask{r.TaskID, r.Info.Task.Instruction})
		}
	}
	if len(tasks) != 50 {
		t.Fatalf("%s holds %d tasks, want 50", tauBench, len(tasks))
	}
	return tasks
}

func guidanceFor(id int) string { return fmt.Sprintf("guidance for task %d", id) }

// writeStore writes a guidance store for tasks, as reflection would, and returns its path.
func writeStore(t *testing.T, tasks []tauTask) string {
	t.Helper()
	var b strings.Builder
	for _, task := range tasks {
		line, _ := json.Marshal(map[string]any{"task_id": task.ID, "task_description": task.Instruction,
			"guidance": guidanceFor(task.ID), "source_runs": 4})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "guidance.jsonl")
	writeFile(t, path, b.String())
	return path
}

// paraphrases are hand-written rewordings of tau-bench airline instructions:
// clauses reordered, synonyms, details dropped, some without the user id.
var paraphrases = []struct {
	task int
	text string
}{
	{0, "I'm mia_li_3668. Book me a one-way economy ticket to Seattle from New York for May 20, leaving after 11am. " +
		"Nonstop is best, a single layover is fine, cheapest wins. Three bags, no insurance; pay with my two certificates."},
	{16, "Complaint about the late departure of flight HAT039 (ATL to SEA): the traveller wants to know why it was " +
		"delayed and expects compensation, a voucher or money back."},
	{12, "Cancel the trip from MCO to CLT and insist on getting the money back."},
	{44, "How many bags in total can I bring on reservation JMO1MG? I think I'm gold. Give me the number as digits."},
	{21, "Switch my May 17 flight out of JFK to a direct one; my cat is ill and I must get home earlier. " +
		"I'll pay a change fee of at most 100 dollars."},
}

func newTestRAG(t *testing.T, o RAGOptions, hc *http.Client) *RAG {
	t.Helper()
	if o.Name == "" {
		o.Name = "rag"
	}
	r, err := NewRAG(context.Background(), o, hc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestRAGTauBenchBM25(t *testing.T) {
	tasks := tauTasks(t)
	r := newTestRAG(t, RAGOptions{GuidanceFile: writeStore(t, tasks)}, nil)
	if r.Len() != 50 {
		t.Fatalf("Len() = %d, want 50", r.Len())
	}
	ctx := context.Background()
	hits := 0
	for _, task := range tasks {
		got, err := r.Augment(ctx, Request{Task: task.Instruction})
		if err != nil {
			t.Fatalf("task %d: %v", task.ID, err)
		}
		if got == guidanceFor(task.ID) {
			hits++
		} else {
			t.Errorf("task %d: got %q", task.ID, got)
		}
	}
	t.Logf("exact instructions: %d/50 retrieve their own guidance", hits)
	for _, p := range paraphrases {
		got, err := r.Augment(ctx, Request{Task: p.text})
		if err != nil {
			t.Fatalf("paraphrase of task %d: %v", p.task, err)
		}
		if want := guidanceFor(p.task); got != want {
			t.Errorf("paraphrase of task %d: got %q, want %q", p.task, got, want)
		}
	}
}

func TestRAGTopKAndMinScore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.jsonl")
	writeFile(t, path, `{"task_id": "a", "task_description": "cancel my flight to Boston", "guidance": "A"}
{"task_id": "b", "task_description": "cancel my hotel in Boston", "guidance": "B"}
{"task_id": "b2", "task_description": "cancel the hotel booking in Boston", "guidance": "B"}
{"task_id": "c", "task_description": "book a train to Paris", "guidance": "C"}
`)
	ctx := context.Background()
	r1 := newTestRAG(t, RAGOptions{GuidanceFile: path}, nil)
	if got, err := r1.Augment(ctx, Request{Task: "please cancel my flight to Boston"}); err != nil || got != "A" {
		t.Errorf("top 1 = %q, %v; want A", got, err)
	}
	// top 3: best first, a guidance already chosen is not repeated, C shares no term.
	r3 := newTestRAG(t, RAGOptions{GuidanceFile: path, TopK: 3}, nil)
	if got, err := r3.Augment(ctx, Request{Task: "please cancel my flight to Boston"}); err != nil || got != "A\n\nB" {
		t.Errorf("top 3 = %q, %v; want \"A\\n\\nB\"", got, err)
	}
	if r1.Version() == r3.Version() {
		t.Error("Version does not depend on top_k")
	}
	for _, task := range []string{"what is the weather like", "the and of it", ""} {
		if _, err := r3.Augment(ctx, Request{Task: task}); !errors.Is(err, ErrNoMatch) || !errors.Is(err, ErrEmpty) {
			t.Errorf("Augment(%q) error = %v, want ErrNoMatch (an ErrEmpty)", task, err)
		}
	}
	high := newTestRAG(t, RAGOptions{GuidanceFile: path, MinScore: 100}, nil)
	if _, err := high.Augment(ctx, Request{Task: "cancel my flight to Boston"}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("min_score 100: error = %v, want ErrNoMatch", err)
	}

	// No match is not an augmenter failure: the breaker stays closed.
	g := NewGuard("rag", high, time.Second, BreakerOptions{Failures: 1, OpenFor: time.Minute}, nil)
	for range 3 {
		if _, err := g.Augment(ctx, Request{Task: "cancel my flight to Boston"}); !errors.Is(err, ErrNoMatch) {
			t.Fatalf("guarded: error = %v, want ErrNoMatch", err)
		}
	}
	if s := g.State(); s != gobreaker.StateClosed {
		t.Errorf("breaker %v after no-match answers, want closed", s)
	}
}

func TestParseGuidance(t *testing.T) {
	good := `{"task_id": 7, "task_description": "d1", "guidance": " g1 ", "extra": {"x": 1}}

{"task_id": "t-2", "task_description": "d2", "guidance": "g2"}
{"task_description": "d3", "guidance": "g3"}
`
	got, err := ParseGuidance([]byte("\uFEFF" + good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Guidance{{"7", "d1", "g1"}, {"t-2", "d2", "g2"}, {"", "d3", "g3"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseGuidance = %+v, want %+v", got, want)
	}
	bad := `{"task_id": 1, "task_description": "d", "guidance": "g"}
{"task_id": 2, "task_description": "d"}
{"task_id": 3, "task_description": "", "guidance": "g"}
not json
{"task_id": [3], "task_description": "d", "guidance": "g"}
`
	_, err = ParseGuidance([]byte(bad))
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"line 2: guidance", "line 3: task_description", "line 4: not a JSON object", "line 5: task_id"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "line 1") {
		t.Errorf("error %q names the good line 1", err)
	}
}

func TestNewRAGErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	if _, err := NewRAG(context.Background(), RAGOptions{Name: "kb", GuidanceFile: missing}, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: error = %v, want it to name the file", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	writeFile(t, bad, "{\"task_description\": \"d\", \"guidance\": \"g\"}\n{oops\n")
	if _, err := NewRAG(context.Background(), RAGOptions{Name: "kb", GuidanceFile: bad}, nil); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: error = %v, want it to name line 2", err)
	}
	if _, err := NewRAG(context.Background(), RAGOptions{Name: "kb"}, nil); err == nil {
		t.Error("no file: no error")
	}
	if _, err := NewRAG(context.Background(), RAGOptions{Name: "kb", GuidanceFile: bad,
		Embeddings: EmbeddingOptions{BaseURL: "http://localhost:1/v1"}}, nil); err == nil || !strings.Contains(err.Error(), "model") {
		t.Errorf("embeddings without a model: error = %v", err)
	}
}

func TestRAGReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guidance.jsonl")
	writeFile(t, path, `{"task_id": 1, "task_description": "refund a cancelled flight", "guidance": "old"}`+"\n")
	r := newTestRAG(t, RAGOptions{Name: "kb", GuidanceFile: path, CheckEvery: 10 * time.Millisecond}, nil)
	ctx := context.Background()
	serving := func() string {
		s, err := r.Augment(ctx, Request{Task: "I want a refund for my cancelled flight"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := serving(); got != "old" {
		t.Fatalf("serving %q", got)
	}
	v1 := r.Version()

	writeFile(t, path, `{"task_id": 1, "task_description": "refund a cancelled flight", "guidance": "new guidance"}`+"\n")
	testkit.Eventually(t, "the rewritten store is not served", func() bool { return serving() == "new guidance" })
	v2 := r.Version()
	if v2 == v1 {
		t.Error("Version did not change with the store")
	}

	// A broken store keeps the loaded one (also a half-written last line).
	writeFile(t, path, `{"task_id": 1, "task_description": "refund a cancelled flight", "guidance": "newest"}`+"\n"+`{"task_id": 2, "task_des`)
	if err := r.Reload(ctx); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Reload of a broken store: error = %v, want line 2", err)
	}
	for range 5 {
		time.Sleep(15 * time.Millisecond)
		if got := serving(); got != "new guidance" {
			t.Fatalf("after a broken rewrite, serving %q", got)
		}
	}
	if r.Version() != v2 {
		t.Error("Version changed though the store did not")
	}
	replaceFile(t, path, `{"task_id": 1, "task_description": "refund a cancelled flight", "guidance": "fixed"}`+"\n")
	testkit.Eventually(t, "the fixed store is not served", func() bool { return serving() == "fixed" })
}

// fakeEmbeddings is an OpenAI-compatible /v1/embeddings server whose vectors are
// deterministic: the text's words hashed into 64 dimensions.
type fakeEmbeddings struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	inputs   int            // texts embedded
	embedded map[string]int // times each text was embedded
	fail     bool
	last     map[string]any
}

func newFakeEmbeddings(t *testing.T) *fakeEmbeddings {
	f := &fakeEmbeddings{embedded: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Input []string `json:"input"`
			Model string   `json:"model"`
		}
		raw, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		fail := f.fail
		f.requests++
		_ = json.Unmarshal(raw, &f.last)
		f.mu.Unlock()
		if r.URL.Path != "/v1/embeddings" || json.Unmarshal(raw, &body) != nil || fail {
			http.Error(w, `{"error": {"message": "unavailable"}}`, http.StatusServiceUnavailable)
			return
		}
		f.mu.Lock()
		f.inputs += len(body.Input)
		for _, text := range body.Input {
			f.embedded[text]++
		}
		f.mu.Unlock()
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		}
		data := make([]item, len(body.Input))
		for i, text := range body.Input {
			// Answer in reverse order: the client must place vectors by index.
			j := len(body.Input) - 1 - i
			data[j] = item{"embedding", i, hashedBagOfWords(text)}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": body.Model,
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeEmbeddings) counts() (requests, inputs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests, f.inputs
}

func (f *fakeEmbeddings) setFail(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

func hashedBagOfWords(text string) []float64 {
	v := make([]float64, 64)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		v[h.Sum32()%64]++
	}
	return v
}

func TestRAGEmbeddings(t *testing.T) {
	tasks := tauTasks(t)
	f := newFakeEmbeddings(t)
	path := writeStore(t, tasks)
	emb := EmbeddingOptions{BaseURL: f.URL + "/v1", Model: "bge-base-en-v1.5", BatchSize: 16}
	r := newTestRAG(t, RAGOptions{GuidanceFile: path, Embeddings: emb}, f.Client())
	if req, in := f.counts(); req != 4 || in != 50 {
		t.Errorf("loading 50 descriptions in batches of 16: %d requests, %d inputs; want 4, 50", req, in)
	}
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	if last["model"] != "bge-base-en-v1.5" || last["encoding_format"] != "float" {
		t.Errorf("request body %v: want model bge-base-en-v1.5, encoding_format float", last)
	}
	ctx := context.Background()
	for _, task := range tasks {
		got, err := r.Augment(ctx, Request{Task: task.Instruction})
		if err != nil {
			t.Fatalf("task %d: %v", task.ID, err)
		}
		if got != guidanceFor(task.ID) {
			t.Errorf("task %d: got %q", task.ID, got)
		}
	}
	if req, in := f.counts(); req != 4+50 || in != 50+50 {
		t.Errorf("after 50 queries: %d requests, %d inputs; want 54, 100 (one per query)", req, in)
	}
	bm := newTestRAG(t, RAGOptions{GuidanceFile: path}, nil)
	if bm.Version() == r.Version() {
		t.Error("Version does not depend on the retrieval mode")
	}

	// The endpoint down at query time: an error, not a crash or a wrong answer.
	f.setFail(true)
	if _, err := r.Augment(ctx, Request{Task: tasks[0].Instruction}); err == nil || errors.Is(err, ErrEmpty) {
		t.Errorf("endpoint down: error = %v, want a failure", err)
	}
	f.setFail(false)
}

func TestRAGEmbeddingsReloadAndRetry(t *testing.T) {
	f := newFakeEmbeddings(t)
	path := filepath.Join(t.TempDir(), "g.jsonl")
	line := func(id int, desc, g string) string {
		b, _ := json.Marshal(map[string]any{"task_id": id, "task_description": desc, "guidance": g})
		return string(b) + "\n"
	}
	writeFile(t, path, line(1, "cancel my flight to Boston", "A")+line(2, "book a train to Paris", "B"))
	emb := EmbeddingOptions{BaseURL: f.URL + "/v1", Model: "m"}

	// The endpoint is down at start: NewRAG succeeds, Augment fails until it is up.
	f.setFail(true)
	r := newTestRAG(t, RAGOptions{Name: "kb", GuidanceFile: path, Embeddings: emb, CheckEvery: 10 * time.Millisecond}, f.Client())
	ctx := context.Background()
	if _, err := r.Augment(ctx, Request{Task: "train to Paris"}); err == nil || !strings.Contains(err.Error(), "not indexed") {
		t.Fatalf("before the index: error = %v", err)
	}
	f.setFail(false)
	testkit.Eventually(t, "the store is not indexed once the endpoint is up", func() bool {
		got, err := r.Augment(ctx, Request{Task: "a train to Paris"})
		return err == nil && got == "B"
	})

	// A reload embeds only the descriptions it has not seen.
	writeFile(t, path, line(1, "cancel my flight to Boston", "A")+line(2, "book a train to Paris", "B2")+line(3, "rent a car in Rome", "C"))
	testkit.Eventually(t, "the new store is not served", func() bool {
		got, err := r.Augment(ctx, Request{Task: "a car in Rome"})
		return err == nil && got == "C"
	})
	if got, err := r.Augment(ctx, Request{Task: "a train to Paris"}); err != nil || got != "B2" {
		t.Errorf("after reload: %q, %v; want B2", got, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, desc := range []string{"cancel my flight to Boston", "book a train to Paris", "rent a car in Rome"} {
		if n := f.embedded[desc]; n != 1 {
			t.Errorf("%q embedded %d times, want once", desc, n)
		}
	}
}
