package augment

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// ErrNoMatch means a retrieval augmenter found no stored entry similar enough to
// the task. It wraps ErrEmpty, but the Guard does not count it as a breaker
// failure: the store answered, it just holds nothing for this task.
var ErrNoMatch = fmt.Errorf("%w: no stored task is similar enough", ErrEmpty)

// BM25 parameters (the usual Okapi values).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// DefaultEmbedBatch is how many stored descriptions go into one embeddings request.
const DefaultEmbedBatch = 64

// Guidance is one entry of a guidance store: a line of the JSON Lines file that
// reflection writes. Other fields of a line are ignored.
type Guidance struct {
	TaskID          string `json:"task_id"` // a JSON string or number
	TaskDescription string `json:"task_description"`
	Guidance        string `json:"guidance"`
}

// EmbeddingOptions selects embedding retrieval: an OpenAI-compatible
// /v1/embeddings endpoint and cosine similarity. BaseURL "" means BM25.
type EmbeddingOptions struct {
	BaseURL   string // e.g. http://tei:8080/v1; "embeddings" is appended
	Model     string
	APIKey    string // "" = a placeholder
	BatchSize int    // descriptions per request; 0 = DefaultEmbedBatch
}

// RAGOptions configures a rag augmenter (mapped from config.Augmenter).
type RAGOptions struct {
	Name         string // augmenter name, used in errors and logs
	GuidanceFile string // JSON Lines of Guidance
	TopK         int    // guidances returned, best first, joined by a blank line; 0 = 1
	MinScore     float64
	Embeddings   EmbeddingOptions
	CheckEvery   time.Duration // how often, at most, Augment looks for a changed file; 0 = DefaultCheckEvery
	Logger       *slog.Logger  // nil = no logs
}

// RAG is the CLEAR paper's retrieval baseline: the guidance of the stored task
// most similar to the agent's task. Similarity is BM25 over the task
// descriptions, or the cosine of their embeddings when an embeddings endpoint
// is configured. The store is reloaded when its file changes.
type RAG struct {
	o      RAGOptions
	log    *slog.Logger
	emb    *embedder // nil = BM25
	optSum []byte    // the answer-relevant options, hashed into Version
	idx    atomic.Pointer[ragIndex]
	watch  *watchedFile

	vecMu sync.Mutex
	vecs  map[string][]float32 // description → unit vector, kept across loads
}

// ragIndex is one loaded store, immutable once built.
type ragIndex struct {
	entries []Guidance
	version string
	bm25    *bm25       // BM25 mode
	vecs    [][]float32 // embedding mode: one unit vector per entry
}

// NewRAG loads the guidance store. A file that cannot be read or parsed is an
// error; embeddings that cannot be computed are not (the endpoint may come up
// later): they are logged and retried by the next Augment calls, which fail
// until then. ctx bounds this first load; hc carries the embeddings transport
// (nil = a plain http.Client).
func NewRAG(ctx context.Context, o RAGOptions, hc *http.Client) (*RAG, error) {
	if o.GuidanceFile == "" {
		return nil, fmt.Errorf("augment: rag %q: guidance_file is empty", o.Name)
	}
	if o.TopK <= 0 {
		o.TopK = 1
	}
	r := &RAG{o: o, log: o.Logger, vecs: map[string][]float32{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if o.Embeddings.BaseURL != "" {
		if o.Embeddings.Model == "" {
			return nil, fmt.Errorf("augment: rag %q: embeddings model is empty", o.Name)
		}
		r.emb = newEmbedder(o.Embeddings, hc)
	}
	r.optSum, _ = json.Marshal(struct {
		TopK     int     `json:"top_k"`
		MinScore float64 `json:"min_score"`
		BaseURL  string  `json:"embeddings_base_url"`
		Model    string  `json:"embeddings_model"`
	}{o.TopK, o.MinScore, o.Embeddings.BaseURL, o.Embeddings.Model})
	what := fmt.Sprintf("augment: rag %q", o.Name)
	r.watch = newWatchedFile(what, o.GuidanceFile, o.CheckEvery, r.log, r.load)
	if err := r.watch.reload(ctx); err != nil {
		if !errors.As(err, new(retryable)) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		r.log.Warn(what+": guidance store not indexed yet; retrying on use", "err", err)
	}
	return r, nil
}

// Augment returns the guidance of the stored task most similar to req.Task (the
// top k, best first, with TopK > 1). No stored task scoring above MinScore is
// ErrNoMatch.
func (r *RAG) Augment(ctx context.Context, req Request) (string, error) {
	r.watch.poll()
	idx := r.idx.Load()
	if idx == nil {
		return "", fmt.Errorf("augment: rag %q: the guidance store is not indexed yet", r.o.Name)
	}
	scores, err := r.scores(ctx, idx, req.Task)
	if err != nil {
		return "", fmt.Errorf("augment: rag %q: %w", r.o.Name, err)
	}
	best := r.top(idx, scores)
	if len(best) == 0 {
		return "", fmt.Errorf("augment: rag %q: %w", r.o.Name, ErrNoMatch)
	}
	out := make([]string, len(best))
	for i, e := range best {
		out[i] = idx.entries[e].Guidance
	}
	return strings.Join(out, "\n\n"), nil
}

// Version is a short hash of the loaded store and the retrieval options: it
// changes when the store does.
// It also looks at the store file (at most once a second): the cache key carries the
// version, so a rewritten store must change it even while every task is a cache hit.
func (r *RAG) Version() string {
	r.watch.poll()
	if idx := r.idx.Load(); idx != nil {
		return idx.version
	}
	return ragVersion(r.optSum, nil)
}

// Len is the number of entries in the loaded store.
func (r *RAG) Len() int {
	if idx := r.idx.Load(); idx != nil {
		return len(idx.entries)
	}
	return 0
}

// Reload loads the file now, whether or not it changed. On error the loaded
// store keeps serving.
func (r *RAG) Reload(ctx context.Context) error { return r.watch.reload(ctx) }

// Close stops reloading and waits for a reload in progress. Augment keeps
// working on the loaded store.
func (r *RAG) Close() error {
	r.watch.close()
	return nil
}

// load parses and indexes data and installs it.
func (r *RAG) load(ctx context.Context, data []byte) error {
	entries, err := ParseGuidance(data)
	if err != nil {
		return err
	}
	idx := &ragIndex{entries: entries, version: ragVersion(r.optSum, data)}
	if r.emb == nil {
		docs := make([][]string, len(entries))
		for i, e := range entries {
			docs[i] = tokenize(e.TaskDescription)
		}
		idx.bm25 = newBM25(docs)
	} else if idx.vecs, err = r.embedStore(ctx, entries); err != nil {
		return retryable{err}
	}
	r.idx.Store(idx)
	r.log.Info("augment: rag guidance store loaded", "augmenter", r.o.Name, "file", r.o.GuidanceFile,
		"entries", len(entries), "version", idx.version)
	return nil
}

// embedStore embeds every distinct description not embedded before, in batches.
// Vectors already computed are reused, so a retry after a failure resumes.
func (r *RAG) embedStore(ctx context.Context, entries []Guidance) ([][]float32, error) {
	r.vecMu.Lock()
	defer r.vecMu.Unlock()
	var todo []string
	queued := map[string]bool{}
	for _, e := range entries {
		if _, ok := r.vecs[e.TaskDescription]; !ok && !queued[e.TaskDescription] {
			queued[e.TaskDescription] = true
			todo = append(todo, e.TaskDescription)
		}
	}
	for batch := range slices.Chunk(todo, r.emb.batch) {
		vecs, err := r.emb.embed(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("embedding the guidance store (%d of %d descriptions done): %w",
				len(queued)-len(todo), len(queued), err)
		}
		for i, v := range vecs {
			r.vecs[batch[i]] = v
		}
		todo = todo[len(batch):]
	}
	out := make([][]float32, len(entries))
	keep := make(map[string][]float32, len(entries))
	for i, e := range entries {
		out[i] = r.vecs[e.TaskDescription]
		keep[e.TaskDescription] = out[i]
	}
	r.vecs = keep // forget descriptions no longer stored
	return out, nil
}

// scores rates every entry of idx against task.
func (r *RAG) scores(ctx context.Context, idx *ragIndex, task string) ([]float64, error) {
	if idx.bm25 != nil {
		return idx.bm25.scores(tokenize(task)), nil
	}
	scores := make([]float64, len(idx.vecs))
	if len(scores) == 0 || strings.TrimSpace(task) == "" {
		return scores, nil
	}
	q, err := r.emb.embed(ctx, []string{task})
	if err != nil {
		return nil, fmt.Errorf("embedding the task: %w", err)
	}
	for i, v := range idx.vecs {
		if len(v) != len(q[0]) {
			return nil, fmt.Errorf("the task's embedding has %d dimensions, the store's %d", len(q[0]), len(v))
		}
		scores[i] = dot(q[0], v)
	}
	return scores, nil
}

// top returns the indexes of the best entries scoring above MinScore, best
// first (ties: file order), at most TopK, skipping a guidance already chosen.
func (r *RAG) top(idx *ragIndex, scores []float64) []int {
	var cand []int
	for i, s := range scores {
		if s > r.o.MinScore {
			cand = append(cand, i)
		}
	}
	slices.SortStableFunc(cand, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	var out []int
	for _, i := range cand {
		if len(out) == r.o.TopK {
			break
		}
		dup := slices.ContainsFunc(out, func(j int) bool { return idx.entries[j].Guidance == idx.entries[i].Guidance })
		if !dup {
			out = append(out, i)
		}
	}
	return out
}

func ragVersion(opts, data []byte) string {
	h := sha256.New()
	h.Write(opts)
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// ParseGuidance parses a guidance store: JSON Lines of Guidance, blank lines
// allowed. Every bad line is reported with its number; any bad line fails the
// whole file.
func ParseGuidance(data []byte) ([]Guidance, error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	var (
		out  []Guidance
		errs []error
	)
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		g, err := parseGuidanceLine(line)
		if err != nil {
			if len(errs) == 10 {
				errs = append(errs, errors.New("… and maybe more"))
				break
			}
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		out = append(out, g)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func parseGuidanceLine(line []byte) (Guidance, error) {
	var raw struct {
		TaskID          json.RawMessage `json:"task_id"`
		TaskDescription *string         `json:"task_description"`
		Guidance        *string         `json:"guidance"`
	}
	if err := json.Unmarshal(line, &raw); err != nil {
		return Guidance{}, fmt.Errorf("not a JSON object: %w", err)
	}
	var g Guidance
	switch id := bytes.TrimSpace(raw.TaskID); {
	case len(id) == 0 || string(id) == "null":
	case id[0] == '"':
		if err := json.Unmarshal(id, &g.TaskID); err != nil {
			return g, fmt.Errorf("task_id: %w", err)
		}
	default:
		if _, err := strconv.ParseFloat(string(id), 64); err != nil {
			return g, fmt.Errorf("task_id must be a string or a number, got %s", id)
		}
		g.TaskID = string(id)
	}
	if raw.TaskDescription == nil || strings.TrimSpace(*raw.TaskDescription) == "" {
		return g, errors.New("task_description is missing or empty")
	}
	if raw.Guidance == nil || strings.TrimSpace(*raw.Guidance) == "" {
		return g, errors.New("guidance is missing or empty")
	}
	g.TaskDescription, g.Guidance = *raw.TaskDescription, strings.TrimSpace(*raw.Guidance)
	return g, nil
}

// stopWords is a small English stop-word list: Lucene's, plus pronouns, auxiliary
// verbs and the tails of contractions ("don't" → "don", "t").
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be but by for if in into is it no not of on or such
		that the their then there these they this to was will with
		i me my mine myself you your yours yourself he him his she her hers it its itself we us our ours
		they them theirs am been being were do does did doing have has had having can could would should
		shall may might must what which who whom whose when where why how from so than too very just also
		about s t d ll m re ve`) {
		m[w] = true
	}
	return m
}()

// tokenize lowercases s, splits it on everything but letters and digits, and
// drops stop words.
func tokenize(s string) []string {
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	out := words[:0]
	for _, w := range words {
		if !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// bm25 is an Okapi BM25 index over tokenised documents.
type bm25 struct {
	post   map[string][]posting // term → the documents holding it, in order
	length []float64            // tokens per document
	avg    float64              // mean document length
}

type posting struct {
	doc int
	tf  float64
}

func newBM25(docs [][]string) *bm25 {
	b := &bm25{post: map[string][]posting{}, length: make([]float64, len(docs))}
	total := 0
	for d, toks := range docs {
		b.length[d] = float64(len(toks))
		total += len(toks)
		tf := map[string]int{}
		for _, t := range toks {
			tf[t]++
		}
		for t, n := range tf {
			b.post[t] = append(b.post[t], posting{doc: d, tf: float64(n)})
		}
	}
	b.avg = 1
	if total > 0 {
		b.avg = float64(total) / float64(len(docs))
	}
	return b
}

// scores is the BM25 score of every document for query. A query term counts as
// often as it occurs; IDF is log(1 + (N - n + 0.5) / (n + 0.5)), never negative.
func (b *bm25) scores(query []string) []float64 {
	out := make([]float64, len(b.length))
	qtf := map[string]float64{}
	for _, t := range query {
		qtf[t]++
	}
	n := float64(len(b.length))
	for t, q := range qtf {
		post := b.post[t]
		if len(post) == 0 {
			continue
		}
		df := float64(len(post))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, p := range post {
			norm := bm25K1 * (1 - bm25B + bm25B*b.length[p.doc]/b.avg)
			out[p.doc] += q * idf * p.tf * (bm25K1 + 1) / (p.tf + norm)
		}
	}
	return out
}

// embedder calls an OpenAI-compatible embeddings endpoint.
type embedder struct {
	svc   openai.EmbeddingService
	model string
	batch int
}

func newEmbedder(o EmbeddingOptions, hc *http.Client) *embedder {
	if hc == nil {
		hc = &http.Client{}
	}
	key := o.APIKey
	if key == "" {
		key = placeholderKey
	}
	batch := o.BatchSize
	if batch <= 0 {
		batch = DefaultEmbedBatch
	}
	// As for the CAM: no OPENAI_* from the environment, no retries.
	svc := openai.NewEmbeddingService(option.WithBaseURL(o.BaseURL), option.WithAPIKey(key),
		option.WithHTTPClient(hc), option.WithMaxRetries(0))
	return &embedder{svc: svc, model: o.Model, batch: batch}
}

// embed returns a unit vector for each text, in order.
func (e *embedder) embed(ctx context.Context, texts []string) ([][]float32, error) {
	res, err := e.svc.New(ctx, openai.EmbeddingNewParams{
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		Model:          e.model,
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	})
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for _, d := range res.Data {
		if d.Index < 0 || int(d.Index) >= len(texts) || out[d.Index] != nil {
			return nil, fmt.Errorf("embeddings: answer has a bad or repeated index %d", d.Index)
		}
		out[d.Index] = unit(d.Embedding)
	}
	for i, v := range out {
		if len(v) == 0 {
			return nil, fmt.Errorf("embeddings: no vector for input %d of %d", i, len(texts))
		}
		if len(v) != len(out[0]) {
			return nil, fmt.Errorf("embeddings: vectors of %d and %d dimensions", len(out[0]), len(v))
		}
	}
	return out, nil
}

// unit scales v to length 1 (a zero vector stays zero).
func unit(v []float64) []float32 {
	var sum float64
	for _, x := range v {
		sum += x * x
	}
	out := make([]float32, len(v))
	if sum == 0 {
		return out
	}
	norm := math.Sqrt(sum)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// dot is the cosine similarity of two unit vectors.
func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
