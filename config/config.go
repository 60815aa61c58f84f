// Package config owns camproxy's YAML schema, its defaults, ${ENV} expansion and
// validation.
//
// A config file is decoded over Default(): keys the file omits keep their
// defaults, while lists and maps the file gives replace the default ones. Each
// entry of augmenters starts from DefaultAugmenter(), so an entry only needs the
// keys it changes. Unknown keys are errors, and every problem in a file is
// reported at once, each naming its dotted key (for example
// "experiment.arms[1].augmenter").
package config

import (
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/camproxy/camproxy/protocol/registry"
)

// Config is the whole camproxy configuration.
type Config struct {
	Server     Server               `yaml:"server"`
	Upstreams  Upstreams            `yaml:"upstreams"`
	Task       Task                 `yaml:"task"`
	SideCalls  SideCalls            `yaml:"side_calls"`
	Placement  Placement            `yaml:"placement"`
	Augmenters map[string]Augmenter `yaml:"augmenters"`
	Experiment Experiment           `yaml:"experiment"` // the one-experiment form
	// Experiments is the list form (a gateway's agents, each with its own experiment);
	// given, it replaces experiment. PerExperiment reads either.
	Experiments []Experiment `yaml:"experiments,omitempty"`
	Cache       Cache        `yaml:"cache"`
	Episodes    Episodes     `yaml:"episodes"`
	Replay      Replay       `yaml:"replay"`
	Rollouts    Rollouts     `yaml:"rollouts"`
	Admin       Admin        `yaml:"admin"`
	Tracing     Tracing      `yaml:"tracing"`
	Learn       Learn        `yaml:"learn"`
}

// Learn is the online playbook learner inside serve (RCL's reflect → mutate on live
// traffic): every Every new rewarded episodes of the champion arm it runs one step,
// writes the next playbook version and adds it as a candidate arm; the guardrail
// stops a harmful candidate and a candidate that beats the champion with confidence
// 1−PromoteAlpha becomes the champion. With it enabled the experiment runs under
// adaptive allocation (experiment.adaptive's keys), whether or not
// experiment.adaptive.enabled is set: the candidates must be steered by Thompson
// sampling and watched by its guardrail.
type Learn struct {
	Enabled       bool    `yaml:"enabled"`
	Every         int     `yaml:"every"`          // new rewarded episodes of the champion that trigger a step
	PromoteAlpha  float64 `yaml:"promote_alpha"`  // promote at P(candidate > champion) ≥ 1−alpha, stop at ≤ alpha
	MaxCandidates int     `yaml:"max_candidates"` // candidate arms running at once
	MinEpisodes   int     `yaml:"min_episodes"`   // rewarded episodes a candidate and the champion need before promote/stop is judged
	MaxTrial      int     `yaml:"max_trial"`      // a candidate with this many rewarded episodes and no verdict is stopped as inconclusive; 0 = never
	// Store holds the versions, the manifest, the learner's state and (Redis) its lease:
	// a directory, s3://bucket/prefix or redis://host:6379/0?prefix=PREFIX.
	Store    string `yaml:"store"`
	Champion string `yaml:"champion"` // the arm that is champion at the first start; "" = the control arm
	From     string `yaml:"from"`     // the replay URI episodes are read from; "" = replay.sinks[0]

	Model          string `yaml:"model"`           // openai/NAME or bedrock/MODEL_ID: reflector and mutator
	ReflectorModel string `yaml:"reflector_model"` // "" = model
	MutatorModel   string `yaml:"mutator_model"`   // "" = model
	BaseURL        string `yaml:"base_url"`        // OpenAI-compatible API base, or a Bedrock endpoint; "" = the provider's
	APIKey         string `yaml:"api_key"`
	Region         string `yaml:"region"` // Bedrock

	BatchSize  int `yaml:"batch_size"`  // items (failure + success pairs) per step; 0 = every new episode
	Prune      int `yaml:"prune"`       // remove entries whose harmful − helpful ≥ prune; 0 = never
	MaxEntries int `yaml:"max_entries"` // entries a version keeps at most; 0 = no bound
	MaxTurns   int `yaml:"max_turns"`   // model turns per role and step
	TopN       int `yaml:"top_n"`       // a version's context keeps its N best entries; 0 = all

	// GuidanceFile, when set, keeps CLEAR's guidance fresh with each step: contrastive
	// reflection (train reflect's agent, on the reflector model) on the tasks whose runs
	// now have mixed outcomes and no guidance in it yet, appended to it. Point it at a
	// rag augmenter's guidance_file: the rag arm reloads it.
	GuidanceFile  string `yaml:"guidance_file"`
	GuidanceTasks int    `yaml:"guidance_tasks"` // tasks reflected on per step at most; 0 = every task that qualifies

	CheckEvery  time.Duration `yaml:"check_every"`  // how often statistics and the shared state are polled
	LeaseTTL    time.Duration `yaml:"lease_ttl"`    // a dead learner's Redis lease expires after this
	StepTimeout time.Duration `yaml:"step_timeout"` // one step's model calls at most
}

// Tracing exports OpenTelemetry traces over OTLP/HTTP; off while Endpoint is "".
type Tracing struct {
	Endpoint    string            `yaml:"endpoint"`          // e.g. http://otel-collector:4318 (/v1/traces is added)
	Headers     map[string]string `yaml:"headers,omitempty"` // sent with each export, e.g. a backend's API key
	ServiceName string            `yaml:"service_name"`      // the resource's service.name
	SampleRatio float64           `yaml:"sample_ratio"`      // of traces camproxy starts; an agent's sampled trace is always followed
}

// Admin secures the admin plane. Without a token its API (tasks, contexts,
// episodes, feedback, rollouts) answers loopback peers only, and a non-loopback
// server.admin_listen is refused unless one of the settings below says why it is safe.
type Admin struct {
	// Token, when set, is required (Authorization: Bearer TOKEN) on every admin
	// endpoint but /healthz, /readyz and /metrics. Use ${ENV} to keep it out of the file.
	Token string `yaml:"token"`
	// LoopbackOnly: the API answers this host's processes only, token or not, while
	// /healthz, /readyz and /metrics answer everyone. A sidecar's setting: the kubelet
	// probes the pod's IP, the agent in the pod posts feedback to 127.0.0.1.
	LoopbackOnly bool `yaml:"loopback_only"`
	// AllowUnauthenticated serves the API to every host without a token (logged
	// loudly at start): only behind a network that is trusted as a whole.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// Pprof serves Go's profiler (net/http/pprof) at /debug/pprof/ on the admin
	// plane, behind the same rules as the API: an operator profiles a running
	// camproxy without a rebuild. false takes the routes away.
	Pprof bool `yaml:"pprof"`
}

// Rollouts is the bridge that turns "run the agent with this context" into a reward.
type Rollouts struct {
	Runner         string        `yaml:"runner"`          // the harness's HTTP endpoint; "" = the rollout API is off
	MaxInFlight    int           `yaml:"max_in_flight"`   // rollouts running at once; more wait their turn
	DefaultTimeout time.Duration `yaml:"default_timeout"` // when a request gives no timeout_s; counted once a slot is free
	// QueueTimeout bounds the wait for a free slot when a request gives no
	// queue_timeout_s; it is not part of the run's timeout.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
}

// Server configures the proxy and admin listeners.
type Server struct {
	Listen        string        `yaml:"listen"`         // proxy address, host:port
	AdminListen   string        `yaml:"admin_listen"`   // admin API and metrics address, host:port
	MaxBodyBytes  int           `yaml:"max_body_bytes"` // largest request body accepted
	ShutdownGrace time.Duration `yaml:"shutdown_grace"` // time in-flight requests get on shutdown
	ReadTimeout   time.Duration `yaml:"read_timeout"`   // time to read one request (headers and body)
	IdleTimeout   time.Duration `yaml:"idle_timeout"`   // keep-alive idle time
	// MaxInFlight is the data plane's admission limit: calls being handled at once (a
	// stream until its last event). 0 = derived from GOMAXPROCS (proxy.DefaultMaxInFlight).
	MaxInFlight int `yaml:"max_in_flight"`
	// QueueTimeout is how long a call past the limit may wait for a slot before it is
	// refused with 503 and Retry-After. 0 = refuse at once.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
}

// Upstreams are the model providers camproxy forwards to, keyed by provider name
// (registry.Providers: openai, azure, anthropic, bedrock, gemini). Default() holds a
// block for every provider; a file's block is decoded over it. Each provider takes
// the keys its registry entry lists (registry.Provider.Keys).
type Upstreams map[string]*Upstream

// Upstream is one provider's block. Which keys a provider takes is its registry
// entry's: HTTP providers take base_url, api_key and the timeouts; OpenAI adds
// websocket; Bedrock takes region and endpoint instead of base_url and api_key.
type Upstream struct {
	BaseURL          string        `yaml:"base_url"`
	APIKey           string        `yaml:"api_key"`            // "" = pass the client's auth through
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"` // wait for response headers
	IdleTimeout      time.Duration `yaml:"idle_timeout"`       // max gap between two body reads of a stream
	// WebSocket (OpenAI only): whether agents' WebSocket sessions get a socket of
	// their own to the upstream: auto (try the upgrade; a refusal sends sessions
	// over HTTP for a while), true (always; a refusal fails the turn) or false (never).
	WebSocket string `yaml:"websocket"`
	Region    string `yaml:"region"`   // Bedrock: "" = the region of the client's own signature
	Endpoint  string `yaml:"endpoint"` // Bedrock: "" = the regional endpoint
}

// UnmarshalYAML decodes each block over the one already there (Default()'s), so a
// file that sets one key keeps the others' defaults. A name no provider has is
// left out here and reported by checkShape.
func (u *Upstreams) UnmarshalYAML(n *yaml.Node) error {
	var raw map[string]yaml.Node
	if err := n.Decode(&raw); err != nil {
		return err
	}
	if *u == nil {
		*u = Upstreams{}
	}
	for name, block := range raw {
		b := (*u)[name]
		if b == nil {
			if registry.ProviderNamed(name) == nil {
				continue
			}
			b = defaultUpstream(registry.ProviderNamed(name))
			(*u)[name] = b
		}
		if err := block.Decode(b); err != nil {
			return err
		}
	}
	return nil
}

// MarshalYAML writes each block with its provider's keys only (registry order), so
// a printed config loads again: the union of every provider's keys would not.
func (u Upstreams) MarshalYAML() (any, error) {
	out := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range registry.Providers {
		b := u[p.Name]
		if b == nil {
			continue
		}
		var block yaml.Node
		if err := block.Encode(b); err != nil {
			return nil, err
		}
		kept := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i+1 < len(block.Content); i += 2 {
			if slices.Contains(p.Keys, block.Content[i].Value) {
				kept.Content = append(kept.Content, block.Content[i], block.Content[i+1])
			}
		}
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: p.Name}, kept)
	}
	return out, nil
}

// Get is the block of the provider named name: the configured one, else its
// defaults (a Config built in code may lack some).
func (u Upstreams) Get(name string) Upstream {
	if b := u[name]; b != nil {
		return *b
	}
	if p := registry.ProviderNamed(name); p != nil {
		return *defaultUpstream(p)
	}
	return Upstream{}
}

// Task says how the task text is found in a conversation.
type Task struct {
	Rules []TaskRule `yaml:"rules"` // the first rule that matches wins
}

// TaskRule is one way of finding the task text: exactly one of Regex,
// FirstUserMessage, LastUserMessage and JSONPath is set; Skip, Strip and Envelopes
// change what it reads (protocol.TaskRule).
type TaskRule struct {
	Regex            string   `yaml:"regex"`              // its single capture group is the task
	FirstUserMessage bool     `yaml:"first_user_message"` // the first user message with text
	LastUserMessage  bool     `yaml:"last_user_message"`  // the last user message of the first turn
	JSONPath         string   `yaml:"json_path"`          // a gjson path to a string of the body
	Skip             []string `yaml:"skip"`               // texts matching one of these are not read
	Strip            []string `yaml:"strip"`              // matches of these are removed from texts
	Envelopes        *bool    `yaml:"envelopes"`          // remove the built-in envelopes (default true)
}

// SideCalls recognises an agent's auxiliary calls — a session title, a compaction
// summary, a probe — which are relayed unaugmented, make no augmenter call and open
// no episode (protocol.SideCallRule).
type SideCalls struct {
	// Builtin keeps the built-in signatures of the suite's harnesses (Claude Code's
	// and Codex's title and compaction calls, one-token probes).
	Builtin bool           `yaml:"builtin"`
	Rules   []SideCallRule `yaml:"rules"` // looked at after the built-in ones
}

// SideCallRule is one kind of side call: every condition given must hold, and at
// least one of model, match and max_tokens is given.
type SideCallRule struct {
	Reason    string `yaml:"reason"`     // the metric label and X-CAM-Side-Call value (default "custom")
	Model     string `yaml:"model"`      // a glob on the model name, case-insensitive ("*haiku*")
	Tools     string `yaml:"tools"`      // any (default) | none | some
	Match     string `yaml:"match"`      // a regex searched in the system/developer messages and the last user message
	MaxTokens int64  `yaml:"max_tokens"` // the call asks for at most this many output tokens
	Quote     string `yaml:"quote"`      // a regex whose capture group is the user's request the call quotes
}

// Placement says where spliced context goes and how it is rendered.
type Placement struct {
	Mode     string `yaml:"mode"`     // append_to_task | system | new_message
	Template string `yaml:"template"` // must contain {{context}}
}

// Augmenter is one context source an arm can use. A key tagged
// augmenter:"TYPE" applies to that type only; untagged keys apply to every type.
type Augmenter struct {
	Type         string         `yaml:"type"` // cam | rag | playbook
	BaseURL      string         `yaml:"base_url" augmenter:"cam"`
	Model        string         `yaml:"model" augmenter:"cam"`
	APIKey       string         `yaml:"api_key" augmenter:"cam"`
	SystemPrompt string         `yaml:"system_prompt" augmenter:"cam"`
	UserTemplate string         `yaml:"user_template" augmenter:"cam"` // must contain {{task}}
	MaxTokens    int            `yaml:"max_tokens" augmenter:"cam"`
	Temperature  float64        `yaml:"temperature" augmenter:"cam"` // 0..2
	Timeout      time.Duration  `yaml:"timeout"`                     // the augment deadline
	ExtraBody    map[string]any `yaml:"extra_body" augmenter:"cam"`  // merged into the CAM request body
	Breaker      Breaker        `yaml:"breaker"`
	GuidanceFile string         `yaml:"guidance_file" augmenter:"rag"` // JSON Lines of {task_id, task_description, guidance}
	TopK         int            `yaml:"top_k" augmenter:"rag"`         // guidances returned, best first
	MinScore     float64        `yaml:"min_score" augmenter:"rag"`     // a stored task must score above it
	Embeddings   Embeddings     `yaml:"embeddings" augmenter:"rag"`    // base_url "" = BM25
	File         string         `yaml:"file" augmenter:"playbook"`     // ACE text or RCL JSON
	TopN         int            `yaml:"top_n" augmenter:"playbook"`    // 0 = every bullet
}

// Embeddings is the OpenAI-compatible /v1/embeddings endpoint a rag augmenter
// may use instead of BM25.
type Embeddings struct {
	BaseURL string `yaml:"base_url"` // "" = BM25, no embeddings
	Model   string `yaml:"model"`
	APIKey  string `yaml:"api_key"`
}

// Breaker configures the circuit breaker around one augmenter.
type Breaker struct {
	Failures uint32        `yaml:"failures"` // consecutive failures that open it
	OpenFor  time.Duration `yaml:"open_for"` // time open before half-open
}

// Experiment assigns episodes to arms. In the list form (experiments) each also has
// the calls it takes (match), and may have its own task rules and learner.
type Experiment struct {
	Name          string   `yaml:"name"`
	Sticky        string   `yaml:"sticky"`         // episode | task
	AllowOverride bool     `yaml:"allow_override"` // honour X-CAM-Arm and X-CAM-Experiment
	Arms          []Arm    `yaml:"arms"`
	Adaptive      Adaptive `yaml:"adaptive"`
	// Match (experiments only): the calls this experiment takes; every key given must
	// hold. The first experiment that matches wins; the one named default takes what
	// no other matched.
	Match Match `yaml:"match,omitempty"`
	Task  *Task `yaml:"task,omitempty"` // experiments only; nil = the top-level task rules
	// Learn (experiments only): this experiment's learner, with a store of its own;
	// nil = none. Its keys default as the top-level learn's.
	Learn *Learn `yaml:"learn,omitempty"`
}

// DefaultExperimentName is the experiment that takes the calls no other matched.
const DefaultExperimentName = "default"

// Match says which calls an experiment takes. Empty, it takes every call.
type Match struct {
	Agents          []string `yaml:"agents,omitempty"`           // X-CAM-Agent header values
	KeyFingerprints []string `yaml:"key_fingerprints,omitempty"` // hex prefixes (8+) of sha256 of the client's credential
	Protocols       []string `yaml:"protocols,omitempty"`        // task explain's protocol names (responses, openai, anthropic, bedrock, gemini …)
	Paths           []string `yaml:"paths,omitempty"`            // globs on the request path
	Models          []string `yaml:"models,omitempty"`           // globs on the model, case-insensitive
	Task            string   `yaml:"task,omitempty"`             // a regexp searched in the task text (found by the experiment's task rules)
}

// Empty says whether m takes every call.
func (m Match) Empty() bool {
	return len(m.Agents)+len(m.KeyFingerprints)+len(m.Protocols)+len(m.Paths)+len(m.Models) == 0 && m.Task == ""
}

// Adaptive is Thompson-sampling allocation over episode rewards.
type Adaptive struct {
	Enabled      bool          `yaml:"enabled"`       // false: the configured weights hold
	UpdatePeriod time.Duration `yaml:"update_period"` // how often shares are recomputed
	MinShare     float64       `yaml:"min_share"`     // floor of every arm not stopped
	Alpha        float64       `yaml:"alpha"`         // guardrail: stop an arm worse than control with confidence 1-alpha
	MinEpisodes  int           `yaml:"min_episodes"`  // rewarded episodes per arm before the guardrail judges
	Control      string        `yaml:"control"`       // "" = the arm named baseline, else the first arm
}

// Arm is one treatment of an experiment.
type Arm struct {
	Name      string     `yaml:"name"`
	Weight    float64    `yaml:"weight"`
	Augmenter string     `yaml:"augmenter"` // "none" or a key of augmenters
	Placement *Placement `yaml:"placement"` // optional override; keys it omits come from placement
}

// Cache configures the context cache.
type Cache struct {
	LocalEntries int           `yaml:"local_entries"` // in-process LRU size; 0 disables it
	TTL          time.Duration `yaml:"ttl"`
	RedisURL     string        `yaml:"redis_url"` // "" = no shared cache
}

// Episodes configures episode state.
type Episodes struct {
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	Store       string        `yaml:"store"`     // memory | redis
	RedisURL    string        `yaml:"redis_url"` // "" = cache.redis_url
}

// Replay configures where replay events go.
type Replay struct {
	Sinks    []string `yaml:"sinks"` // file://, redis:// or s3:// URIs
	Queue    int      `yaml:"queue"`
	SpoolDir string   `yaml:"spool_dir"`
	// KeepMedia records the bytes of images, audio and files given inline in a
	// conversation; by default a step keeps their SHA-256 and media type.
	KeepMedia bool `yaml:"keep_media"`
	// MaxAnswerBytes bounds the recorded copy of one answer (its text, reasoning, tool
	// calls); past it the step keeps the answer's first bytes and says how many it
	// lacks (answer_truncated_bytes). The agent always gets the answer whole. It bounds
	// the memory an open stream holds for the record. 0: the default, 1 MiB.
	MaxAnswerBytes int `yaml:"max_answer_bytes"`
}

// Values accepted by enumerated keys.
const (
	AugmenterNone     = "none"     // the arm augmenter that adds no context
	AugmenterCAM      = "cam"      // a Context Augmentation Model
	AugmenterRAG      = "rag"      // the guidance of the most similar stored task
	AugmenterPlaybook = "playbook" // one ACE / RCL playbook for every task

	StickyEpisode = "episode"
	StickyTask    = "task"

	StoreMemory = "memory"
	StoreRedis  = "redis"

	ContextPlaceholder = "{{context}}"
	TaskPlaceholder    = "{{task}}"
)

// DefaultCAMSystemPrompt is the system prompt sent to a CAM augmenter that sets none.
const DefaultCAMSystemPrompt = `You are a context augmentation model. You are given the task an AI agent has been asked to complete. Write concise guidance, specific to this task, that will help the agent complete it correctly.

Cover what is relevant:
- the key steps, in a sensible order;
- the constraints, rules and requirements the task states or implies;
- likely pitfalls and common mistakes to avoid;
- the checks the agent should make before it acts and before it reports that it is done.

Be specific to this task, not generic. Do not restate the task, do not address the user, and do not invent facts, names, identifiers or values that the task does not give. Output only the guidance, as a short list of imperative points.`

// Default returns the built-in configuration, the one camproxy runs with no
// config file. It passes Validate.
func Default() *Config {
	return &Config{
		Admin: Admin{Pprof: true},
		Server: Server{
			// Loopback: a sidecar's agent is in the same pod; a gateway binds
			// 0.0.0.0 explicitly (and sets admin.token for the admin plane).
			Listen:        "127.0.0.1:8080",
			AdminListen:   "127.0.0.1:9090",
			MaxBodyBytes:  32 << 20,
			ShutdownGrace: 30 * time.Second,
			ReadTimeout:   60 * time.Second,
			IdleTimeout:   90 * time.Second,
			QueueTimeout:  time.Second,
		},
		Upstreams:  defaultUpstreams(),
		Task:       Task{Rules: []TaskRule{{FirstUserMessage: true}}},
		SideCalls:  SideCalls{Builtin: true, Rules: []SideCallRule{}},
		Placement:  Placement{Mode: "append_to_task", Template: "\n\n" + ContextPlaceholder},
		Augmenters: map[string]Augmenter{},
		Experiment: DefaultExperiment(),
		Cache:      Cache{LocalEntries: 10000, TTL: 24 * time.Hour},
		Episodes:   Episodes{IdleTimeout: 30 * time.Minute, Store: StoreMemory},
		Replay: Replay{
			Sinks:    []string{"file://./camproxy-data/replay"},
			Queue:    10000,
			SpoolDir: "./camproxy-data/spool",
			// Above the longest answer a model writes (128k output tokens are about
			// 0.5 MiB): only a runaway or hostile stream is cut (protocol.DefaultMaxAnswer).
			MaxAnswerBytes: 1 << 20,
		},
		Rollouts: Rollouts{MaxInFlight: 64, DefaultTimeout: 10 * time.Minute, QueueTimeout: time.Hour},
		Tracing:  Tracing{ServiceName: "camproxy", SampleRatio: 1},
		Learn:    DefaultLearn(),
	}
}

// DefaultExperiment is what experiment, and each experiments entry, starts from.
func DefaultExperiment() Experiment {
	return Experiment{
		Name:     DefaultExperimentName,
		Sticky:   StickyEpisode,
		Arms:     []Arm{{Name: "baseline", Weight: 1, Augmenter: AugmenterNone}},
		Adaptive: Adaptive{UpdatePeriod: 30 * time.Second, MinShare: 0.05, Alpha: 0.05, MinEpisodes: 20},
	}
}

// DefaultLearn is what learn, and each experiment's learn, starts from.
func DefaultLearn() Learn {
	return Learn{Every: 20, PromoteAlpha: 0.05, MaxCandidates: 2, MinEpisodes: 20, MaxTrial: 200, Store: "./camproxy-data/playbook",
		BatchSize: 8, Prune: 3, MaxEntries: 100, MaxTurns: 12, GuidanceTasks: 5, CheckEvery: 5 * time.Second, LeaseTTL: 30 * time.Second,
		StepTimeout: 10 * time.Minute}
}

// PerExperiment is the config as each experiment sees it, in match order (the
// default experiment last): the config itself for the one-experiment form; for the
// list form a copy per entry whose experiment is that entry, whose task rules are
// its own (else the top-level ones) and whose learn is its own (else disabled). The
// copies share c's maps and lists: read them, do not change them.
func (c *Config) PerExperiment() []*Config {
	if len(c.Experiments) == 0 {
		return []*Config{c}
	}
	out := make([]*Config, 0, len(c.Experiments))
	var def *Config
	for _, e := range c.Experiments {
		v := c.view(e)
		if e.Name == DefaultExperimentName {
			def = v
			continue
		}
		out = append(out, v)
	}
	if def != nil {
		out = append(out, def)
	}
	return out
}

// view is the config as experiment e sees it (PerExperiment).
func (c *Config) view(e Experiment) *Config {
	v := *c
	v.Experiments = nil
	v.Experiment = e
	v.Experiment.Task, v.Experiment.Learn = nil, nil
	if e.Task != nil {
		v.Task = *e.Task
	}
	v.Learn = Learn{}
	if e.Learn != nil {
		v.Learn = *e.Learn
	}
	return &v
}

// ExperimentNames are the configured experiments' names, in PerExperiment's order.
func (c *Config) ExperimentNames() []string {
	var names []string
	for _, v := range c.PerExperiment() {
		names = append(names, v.Experiment.Name)
	}
	return names
}

// defaultUpstreams is a block for every provider in the registry.
func defaultUpstreams() Upstreams {
	u := make(Upstreams, len(registry.Providers))
	for _, p := range registry.Providers {
		u[p.Name] = defaultUpstream(p)
	}
	return u
}

// defaultUpstream is p's block before the file: its registry defaults, and the
// timeouts every upstream shares (long: a model may think for minutes).
func defaultUpstream(p *registry.Provider) *Upstream {
	return &Upstream{BaseURL: p.BaseURL, FirstByteTimeout: 10 * time.Minute, IdleTimeout: 5 * time.Minute,
		WebSocket: p.Defaults["websocket"], Region: p.Defaults["region"]}
}

// DefaultAugmenter returns the values an augmenters entry starts from; the keys a
// file gives for that entry override them. Type is left empty: it is required.
func DefaultAugmenter() Augmenter {
	return Augmenter{
		BaseURL:      "http://localhost:8000/v1",
		Model:        "cam",
		SystemPrompt: DefaultCAMSystemPrompt,
		UserTemplate: TaskPlaceholder,
		MaxTokens:    512,
		Timeout:      3 * time.Second,
		Breaker:      Breaker{Failures: 5, OpenFor: 30 * time.Second},
		TopK:         1,
	}
}

// EffectiveRedisURL is the Redis URL the episode store uses: episodes.redis_url,
// else cache.redis_url.
func (e Episodes) EffectiveRedisURL(c Cache) string {
	if e.RedisURL != "" {
		return e.RedisURL
	}
	return c.RedisURL
}
