package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/protocol/registry"
)

// env returns a getenv over a fixed map.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

var noEnv = env(nil)

// fieldKeys returns the Key of every *FieldError in err's tree, in order.
func fieldKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*FieldError); ok {
			keys = append(keys, fe.Key)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return keys
}

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	rules, err := Default().Task.Compile()
	if err != nil || len(rules) != 1 || !rules[0].FirstUserMessage {
		t.Fatalf("Default().Task.Compile() = %+v, %v", rules, err)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":        "",
		"comment":      "# nothing here\n",
		"document":     "---\n",
		"null":         "null\n",
		"empty map":    "{}\n",
		"null section": "server:\naugmenters:\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(doc), noEnv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if want := Default(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Parse(%q) =\n%+v\nwant Default() =\n%+v", doc, got, want)
			}
		})
	}
}

func fullConfig() *Config {
	return &Config{
		Server: Server{
			Listen:        "127.0.0.1:8081",
			AdminListen:   "127.0.0.1:9091",
			MaxBodyBytes:  1048576,
			ShutdownGrace: 10 * time.Second,
			ReadTimeout:   45 * time.Second,
			IdleTimeout:   2 * time.Minute,
			MaxInFlight:   512,
			QueueTimeout:  250 * time.Millisecond,
		},
		Upstreams: Upstreams{
			"openai": {BaseURL: "https://openai.example.com", APIKey: "sk-openai",
				FirstByteTimeout: 5 * time.Minute, IdleTimeout: time.Minute, WebSocket: "false"},
			"anthropic": {BaseURL: "https://anthropic.example.com", APIKey: "sk-ant",
				FirstByteTimeout: 6 * time.Minute, IdleTimeout: 2 * time.Minute},
			"bedrock": {Region: "eu-west-1", Endpoint: "https://bedrock.example.com", FirstByteTimeout: 10 * time.Minute, IdleTimeout: 5 * time.Minute},
			"gemini": {BaseURL: "https://gemini.example.com", APIKey: "gm-key",
				FirstByteTimeout: 4 * time.Minute, IdleTimeout: 3 * time.Minute},
			"azure": {BaseURL: "https://contoso.openai.azure.com", APIKey: "az-key",
				FirstByteTimeout: 7 * time.Minute, IdleTimeout: 2 * time.Minute},
		},
		Task: Task{Rules: []TaskRule{{Regex: `(?s)\nTask: (.+)$`}, {FirstUserMessage: true}}},
		SideCalls: SideCalls{Builtin: true, Rules: []SideCallRule{{Reason: "title", Model: "*haiku*", Tools: "none",
			Match: "(?i)generate a .*title", Quote: `conversation: "(.*)"`}}},
		Placement: Placement{Mode: "system", Template: "\n\nGuidance:\n{{context}}"},
		Augmenters: map[string]Augmenter{
			"cam": {
				Type:         "cam",
				BaseURL:      "http://cam.internal:8000/v1",
				Model:        "cam-7b",
				APIKey:       "cam-secret",
				SystemPrompt: "You write guidance.",
				UserTemplate: "Task:\n{{task}}",
				MaxTokens:    256,
				Temperature:  0.7,
				Timeout:      5 * time.Second,
				ExtraBody: map[string]any{
					"chat_template_kwargs": map[string]any{"enable_thinking": false},
					"top_p":                0.9,
					"stop":                 []any{"</guidance>"},
				},
				Breaker: Breaker{Failures: 3, OpenFor: time.Minute},
				TopK:    1, // DefaultAugmenter's, whatever the type
			},
			"cam-small": func() Augmenter {
				a := DefaultAugmenter()
				a.Type, a.Model = "cam", "cam-1b"
				return a
			}(),
			"rag": func() Augmenter {
				a := DefaultAugmenter()
				a.Type, a.GuidanceFile, a.TopK, a.MinScore = "rag", "/var/lib/camproxy/guidance.jsonl", 2, 1.5
				a.Embeddings = Embeddings{BaseURL: "http://tei.internal:8080/v1", Model: "bge-base-en-v1.5", APIKey: "emb-secret"}
				a.Timeout, a.Breaker = time.Second, Breaker{Failures: 2, OpenFor: 10 * time.Second}
				return a
			}(),
			"ace": func() Augmenter {
				a := DefaultAugmenter()
				a.Type, a.File, a.TopN = "playbook", "/var/lib/camproxy/playbook.txt", 20
				return a
			}(),
		},
		Experiment: Experiment{
			Adaptive:      Adaptive{Enabled: true, UpdatePeriod: time.Minute, MinShare: 0.1, Alpha: 0.01, MinEpisodes: 50, Control: "baseline"},
			Name:          "cam-vs-baseline",
			Sticky:        "task",
			AllowOverride: true,
			Arms: []Arm{
				{Name: "baseline", Weight: 1, Augmenter: "none"},
				{Name: "cam", Weight: 2, Augmenter: "cam",
					Placement: &Placement{Mode: "new_message", Template: "\n\nGuidance:\n{{context}}"}},
				{Name: "cam-small", Weight: 0.5, Augmenter: "cam-small",
					Placement: &Placement{Mode: "append_to_task", Template: "\n\n<context>{{context}}</context>"}},
			},
		},
		Cache: Cache{LocalEntries: 500, TTL: time.Hour, RedisURL: "redis://:hunter2@redis.internal:6379/1"},
		Episodes: Episodes{IdleTimeout: 15 * time.Minute, Store: "redis",
			RedisURL: "rediss://camproxy:s3cret@episodes.internal:6380/0"},
		Replay: Replay{
			Sinks: []string{
				"file:///var/lib/camproxy/replay",
				"redis://:pw@redis.internal:6379/0?stream=camproxy:replay",
				"s3://camproxy-replay/prod?region=eu-west-1",
			},
			Queue:          2048,
			SpoolDir:       "/var/lib/camproxy/spool",
			MaxAnswerBytes: 512 << 10,
		},
		Rollouts: Rollouts{Runner: "http://harness.internal:7000/run", MaxInFlight: 32, DefaultTimeout: 5 * time.Minute, QueueTimeout: 20 * time.Minute},
		Admin:    Admin{Pprof: true},
		Tracing:  Tracing{ServiceName: "camproxy", SampleRatio: 1},
		Learn: Learn{Enabled: true, Every: 30, PromoteAlpha: 0.01, MaxCandidates: 1, MinEpisodes: 40, MaxTrial: 120,
			Store: "redis://:pw@redis.internal:6379/1?key=camproxy:playbook", Champion: "baseline",
			From: "redis://:pw@redis.internal:6379/0?stream=camproxy:replay", Model: "openai/gpt-4o-mini",
			MutatorModel: "bedrock/anthropic.claude-3-5-sonnet", BaseURL: "https://llm.internal/v1", APIKey: "sk-learn",
			Region: "eu-west-1", BatchSize: 4, Prune: 2, MaxEntries: 50, MaxTurns: 8, TopN: 10, GuidanceFile: "/var/lib/camproxy/guidance.jsonl", GuidanceTasks: 3, CheckEvery: 2 * time.Second,
			LeaseTTL: 10 * time.Second, StepTimeout: 5 * time.Minute},
	}
}

func TestLoadFull(t *testing.T) {
	got, err := Load(filepath.Join("testdata", "full.yaml"), noEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := fullConfig()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(full.yaml) =\n%#v\nwant\n%#v", got, want)
	}
	if got.Augmenters["cam-small"].SystemPrompt != DefaultCAMSystemPrompt {
		t.Errorf("cam-small did not get the default system prompt")
	}
}

func TestLoadErrorNamesFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := Load(missing, noEnv); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v, want it to name %s", err, missing)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  listn: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad, noEnv)
	if err == nil || !strings.Contains(err.Error(), bad) || !slices.Contains(fieldKeys(err), "server.listn") {
		t.Errorf("Load(bad) error = %v, want it to name %s and server.listn", err, bad)
	}
}

func TestEnvExpansion(t *testing.T) {
	tests := []struct {
		name    string
		value   string // the api_key value in the file
		vars    map[string]string
		want    string   // the decoded api_key
		wantErr []string // substrings of the error; nil = no error
	}{
		{name: "set", value: `"${KEY}"`, vars: map[string]string{"KEY": "sk-1"}, want: "sk-1"},
		{name: "set empty", value: `"${KEY}"`, vars: map[string]string{"KEY": ""}, want: ""},
		{name: "unset", value: `"${KEY}"`, wantErr: []string{"KEY", "line 3"}},
		{name: "two unset", value: `"${A}${B}"`, wantErr: []string{"A is not set", "B is not set"}},
		{name: "default when unset", value: `"${KEY:-fallback}"`, want: "fallback"},
		{name: "default when empty", value: `"${KEY:-fallback}"`, vars: map[string]string{"KEY": ""}, want: "fallback"},
		{name: "set beats default", value: `"${KEY:-fallback}"`, vars: map[string]string{"KEY": "sk-2"}, want: "sk-2"},
		{name: "empty default", value: `"${KEY:-}"`, want: ""},
		{name: "dollar escape", value: `"$${KEY}"`, want: "${KEY}"},
		{name: "double escape", value: `"a$$$$b"`, want: "a$$b"},
		{name: "bare dollar var untouched", value: `"$KEY"`, vars: map[string]string{"KEY": "x"}, want: "$KEY"},
		{name: "lone dollar", value: `"cost $5"`, want: "cost $5"},
		{name: "embedded", value: `"pre-${KEY}-post"`, vars: map[string]string{"KEY": "mid"}, want: "pre-mid-post"},
		{name: "invalid name", value: `"${1KEY}"`, wantErr: []string{"invalid variable reference", "line 3"}},
		{name: "unterminated", value: `"${KEY"`, wantErr: []string{"unterminated", "line 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "upstreams:\n  openai:\n    api_key: " + tt.value + "\n"
			cfg, err := Parse([]byte(doc), env(tt.vars))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Parse succeeded, want error containing %q", tt.wantErr)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Upstreams["openai"].APIKey; got != tt.want {
				t.Errorf("api_key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEnvExpansionTypedValues(t *testing.T) {
	doc := "augmenters:\n  cam:\n    type: cam\n    max_tokens: ${MAX}\n    timeout: ${TIMEOUT:-7s}\n"
	cfg, err := Parse([]byte(doc), env(map[string]string{"MAX": "99"}))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if a := cfg.Augmenters["cam"]; a.MaxTokens != 99 || a.Timeout != 7*time.Second {
		t.Errorf("max_tokens, timeout = %d, %v; want 99, 7s", a.MaxTokens, a.Timeout)
	}
}

func TestUnknownKeysAllReported(t *testing.T) {
	doc := `
bogus: 1
server:
  listn: ":8080"
upstreams:
  openai:
    apikey: x
augmenters:
  cam:
    type: cam
    timout: 3s
    breaker:
      fails: 2
    extra_body:
      anything: {goes: here}
experiment:
  arms:
    - name: a
      weight: 1
      augmenter: cam
      wieght: 2
      placement:
        modes: system
`
	_, err := Parse([]byte(doc), noEnv)
	want := []string{
		"bogus",
		"server.listn",
		"upstreams.openai.apikey",
		"augmenters.cam.timout",
		"augmenters.cam.breaker.fails",
		"experiment.arms[0].wieght",
		"experiment.arms[0].placement.modes",
	}
	got := fieldKeys(err)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("error does not report %s; keys = %q", k, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d problems %q, want exactly %q", len(got), got, want)
	}
	if err != nil && !strings.Contains(err.Error(), "server.listn: unknown key") {
		t.Errorf("error %q lacks \"server.listn: unknown key\"", err)
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, doc, key string
		msg            string // optional substring of the message
	}{
		{"listen not host:port", "server: {listen: '8080'}", "server.listen", "host:port"},
		{"listen bad port", "server: {listen: ':http-ish'}", "server.listen", "port"},
		{"admin same as listen", "server: {listen: ':8080', admin_listen: ':8080'}", "server.admin_listen", "differ"},
		{"admin on every interface without a token", "server: {admin_listen: '0.0.0.0:9090'}", "server.admin_listen", "admin.token"},
		{"max body", "server: {max_body_bytes: 0}", "server.max_body_bytes", "> 0"},
		{"zero duration", "server: {shutdown_grace: 0s}", "server.shutdown_grace", "> 0"},
		{"negative duration", "server: {read_timeout: -1s}", "server.read_timeout", "> 0"},
		{"bad duration", "server: {idle_timeout: 3 sec}", "server.idle_timeout", "duration"},
		{"integer duration", "server: {idle_timeout: 30}", "server.idle_timeout", "duration"},
		{"negative max in flight", "server: {max_in_flight: -1}", "server.max_in_flight", ">= 0"},
		{"negative queue timeout", "server: {queue_timeout: -1s}", "server.queue_timeout", ">= 0"},
		{"string for int", "server: {max_body_bytes: lots}", "server.max_body_bytes", "integer"},
		{"mapping for string", "server: {listen: {a: b}}", "server.listen", "mapping"},
		{"scalar for section", "server: 5", "server", "mapping"},
		{"scalar top level", "5", "", "mapping"},
		{"duplicate key", "server:\n  listen: ':1'\n  listen: ':2'\n", "server.listen", "duplicate"},
		{"upstream relative url", "upstreams: {openai: {base_url: '/v1'}}", "upstreams.openai.base_url", "http"},
		{"short admin token", "admin: {token: short}", "admin.token", "at least 16"},
		{"tracing endpoint", "tracing: {endpoint: 'collector:4318'}", "tracing.endpoint", "http"},
		{"tracing ratio", "tracing: {sample_ratio: 2}", "tracing.sample_ratio", "between 0 and 1"},
		{"upstream ftp url", "upstreams: {anthropic: {base_url: 'ftp://x'}}", "upstreams.anthropic.base_url", "http"},
		{"upstream no host", "upstreams: {openai: {base_url: 'http://'}}", "upstreams.openai.base_url", "host"},
		{"upstream timeout", "upstreams: {openai: {first_byte_timeout: 0s}}", "upstreams.openai.first_byte_timeout", ""},
		{"bedrock timeout", "upstreams: {bedrock: {idle_timeout: 0s}}", "upstreams.bedrock.idle_timeout", "must be > 0"},
		{"websocket mode", "upstreams: {openai: {websocket: sometimes}}", "upstreams.openai.websocket", "auto, true or false"},
		{"websocket on anthropic", "upstreams: {anthropic: {websocket: auto}}", "upstreams.anthropic.websocket", "unknown key; the anthropic upstream takes base_url, api_key, first_byte_timeout, idle_timeout"},
		{"unknown provider", "upstreams: {gemnii: {base_url: 'https://x'}}", "upstreams.gemnii", "did you mean upstreams.gemini?"},
		{"unknown provider far", "upstreams: {mistral: {base_url: 'https://x'}}", "upstreams.mistral", "the providers are openai, azure, anthropic, bedrock, gemini"},
		{"api_key on bedrock", "upstreams: {bedrock: {api_key: k}}", "upstreams.bedrock.api_key", "the bedrock upstream takes region, endpoint"},
		{"base_url typo", "upstreams: {openai: {baseurl: 'https://x'}}", "upstreams.openai.baseurl", "did you mean upstreams.openai.base_url?"},
		{"bedrock endpoint not a URL", "upstreams: {bedrock: {endpoint: 'ftp://x'}}", "upstreams.bedrock.endpoint", ""},
		{"gemini ftp url", "upstreams: {gemini: {base_url: 'ftp://x'}}", "upstreams.gemini.base_url", "http"},
		{"websocket on gemini", "upstreams: {gemini: {websocket: auto}}", "upstreams.gemini.websocket", "unknown key"},
		{"azure ftp url", "upstreams: {azure: {base_url: 'ftp://x'}}", "upstreams.azure.base_url", "http"},
		{"azure key without endpoint", "upstreams: {azure: {api_key: k}}", "upstreams.azure.api_key", "base_url"},
		{"azure timeout without endpoint", "upstreams: {azure: {idle_timeout: 0s}}", "upstreams.azure.idle_timeout", "must be > 0"},
		{"websocket on azure", "upstreams: {azure: {base_url: 'https://r.openai.azure.com', websocket: auto}}", "upstreams.azure.websocket", "unknown key"},
		{"websocket list", "upstreams: {openai: {websocket: [true]}}", "upstreams.openai.websocket", "string"},
		{"bedrock endpoint", "upstreams: {bedrock: {endpoint: 'bedrock'}}", "upstreams.bedrock.endpoint", ""},
		{"no rules", "task: {rules: []}", "task.rules", "at least one"},
		{"rule both", "task: {rules: [{regex: '(x)', first_user_message: true}]}", "task.rules[0]", "exactly one"},
		{"rule neither", "task: {rules: [{first_user_message: false}]}", "task.rules[0]", "exactly one"},
		{"regex no group", "task: {rules: [{first_user_message: true}, {regex: 'Task: .+'}]}", "task.rules[1].regex", "capture group"},
		{"regex two groups", "task: {rules: [{regex: '(a)(b)'}]}", "task.rules[0].regex", "capture group"},
		{"regex bad", "task: {rules: [{regex: '(unclosed'}]}", "task.rules[0].regex", "compile"},
		{"rule last and first", "task: {rules: [{last_user_message: true, first_user_message: true}]}", "task.rules[0]", "exactly one"},
		{"rule json_path and regex", "task: {rules: [{json_path: metadata.task, regex: '(x)'}]}", "task.rules[0]", "exactly one"},
		{"rule only modifiers", "task: {rules: [{strip: ['x'], envelopes: false}]}", "task.rules[0]", "exactly one"},
		{"json_path spaces", "task: {rules: [{json_path: ' metadata.task'}]}", "task.rules[0].json_path", "spaces"},
		{"skip bad", "task: {rules: [{first_user_message: true, skip: ['ok', '(']}]}", "task.rules[0].skip[1]", "compile"},
		{"strip bad", "task: {rules: [{last_user_message: true, strip: ['[']}]}", "task.rules[0].strip[0]", "compile"},
		{"strip empty", "task: {rules: [{first_user_message: true, strip: ['']}]}", "task.rules[0].strip[0]", "empty"},
		{"placement mode", "placement: {mode: prepend}", "placement.mode", "append_to_task"},
		{"placement template", "placement: {template: 'ctx'}", "placement.template", "{{context}}"},
		{"augmenter name", "augmenters: {Cam: {type: cam}}", "augmenters.Cam", "must match"},
		{"augmenter none", "augmenters: {none: {type: cam}}", "augmenters.none", "reserved"},
		{"augmenter unknown type", "augmenters: {x: {type: magic}}", "augmenters.x.type", "supported: cam, rag, playbook"},
		{"rag no guidance_file", "augmenters: {kb: {type: rag}}", "augmenters.kb.guidance_file", "required"},
		{"rag top_k", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, top_k: 0}}", "augmenters.kb.top_k", ">= 1"},
		{"rag top_k type", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, top_k: best}}", "augmenters.kb.top_k", "integer"},
		{"rag min_score nan", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, min_score: .nan}}", "augmenters.kb.min_score", "finite"},
		{"rag embeddings url", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, embeddings: {base_url: 'tei:8080', model: bge}}}", "augmenters.kb.embeddings.base_url", "http"},
		{"rag embeddings model", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, embeddings: {base_url: 'http://tei:8080/v1'}}}", "augmenters.kb.embeddings.model", "required"},
		{"rag embeddings no url", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, embeddings: {model: bge}}}", "augmenters.kb.embeddings.base_url", "required"},
		{"rag embeddings unknown", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, embeddings: {url: x}}}", "augmenters.kb.embeddings.url", "unknown key"},
		{"rag cam key", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, model: bge}}", "augmenters.kb.model", "applies to type cam only, not rag"},
		{"rag timeout", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, timeout: 0s}}", "augmenters.kb.timeout", "> 0"},
		{"rag breaker", "augmenters: {kb: {type: rag, guidance_file: g.jsonl, breaker: {failures: 0}}}", "augmenters.kb.breaker.failures", ">= 1"},
		{"playbook no file", "augmenters: {ace: {type: playbook}}", "augmenters.ace.file", "required"},
		{"playbook top_n", "augmenters: {ace: {type: playbook, file: p.txt, top_n: -1}}", "augmenters.ace.top_n", ">= 0"},
		{"playbook rag key", "augmenters: {ace: {type: playbook, file: p.txt, guidance_file: g.jsonl}}", "augmenters.ace.guidance_file", "applies to type rag only, not playbook"},
		{"cam playbook key", "augmenters: {cam: {type: cam, top_n: 3}}", "augmenters.cam.top_n", "applies to type playbook only, not cam"},
		{"augmenter no type", "augmenters: {x: {model: m}}", "augmenters.x.type", "required"},
		{"augmenter null", "augmenters: {x: }", "augmenters.x.type", "required"},
		{"augmenter base_url", "augmenters: {x: {type: cam, base_url: 'localhost:8000'}}", "augmenters.x.base_url", ""},
		{"augmenter model", "augmenters: {x: {type: cam, model: ''}}", "augmenters.x.model", "required"},
		{"augmenter max_tokens", "augmenters: {x: {type: cam, max_tokens: 0}}", "augmenters.x.max_tokens", "> 0"},
		{"augmenter temperature high", "augmenters: {x: {type: cam, temperature: 2.5}}", "augmenters.x.temperature", "[0, 2]"},
		{"augmenter temperature nan", "augmenters: {x: {type: cam, temperature: .nan}}", "augmenters.x.temperature", ""},
		{"augmenter timeout", "augmenters: {x: {type: cam, timeout: 3}}", "augmenters.x.timeout", "duration"},
		{"augmenter bad timeout", "augmenters: {x: {type: cam, timeout: 3 sec}}", "augmenters.x.timeout", `"3 sec"`},
		{"augmenter user_template", "augmenters: {x: {type: cam, user_template: 'do it'}}", "augmenters.x.user_template", "{{task}}"},
		{"augmenter extra_body scalar", "augmenters: {x: {type: cam, extra_body: 5}}", "augmenters.x.extra_body", "mapping"},
		{"augmenter extra_body not json", "augmenters: {x: {type: cam, extra_body: {a: {1: b}}}}", "augmenters.x.extra_body", "JSON"},
		{"augmenter breaker failures", "augmenters: {x: {type: cam, breaker: {failures: 0}}}", "augmenters.x.breaker.failures", ">= 1"},
		{"augmenter breaker negative", "augmenters: {x: {type: cam, breaker: {failures: -1}}}", "augmenters.x.breaker.failures", "0 to 4294967295"},
		{"augmenter breaker open_for", "augmenters: {x: {type: cam, breaker: {open_for: 0s}}}", "augmenters.x.breaker.open_for", ""},
		{"augmenters list", "augmenters: [cam]", "augmenters", "mapping"},
		{"experiment name", "experiment: {name: ''}", "experiment.name", "required"},
		{"sticky", "experiment: {sticky: user}", "experiment.sticky", "episode"},
		{"no arms", "experiment: {arms: []}", "experiment.arms", "at least one"},
		{"null arms", "experiment: {arms: }", "experiment.arms", "at least one"},
		{"arm name", "experiment: {arms: [{weight: 1, augmenter: none}]}", "experiment.arms[0].name", "required"},
		{"arm name spaces", "experiment: {arms: [{name: 'a b', weight: 1, augmenter: none}]}", "experiment.arms[0].name", "printable"},
		{"arm duplicate", "experiment: {arms: [{name: a, weight: 1, augmenter: none}, {name: a, weight: 1, augmenter: none}]}", "experiment.arms[1].name", "experiment.arms[0]"},
		{"arm weight negative", "experiment: {arms: [{name: a, weight: -1, augmenter: none}, {name: b, weight: 1, augmenter: none}]}", "experiment.arms[0].weight", ">= 0"},
		{"arm weight inf", "experiment: {arms: [{name: a, weight: .inf, augmenter: none}]}", "experiment.arms[0].weight", "finite"},
		{"arm weights zero", "experiment: {arms: [{name: a, weight: 0, augmenter: none}]}", "experiment.arms", "sum"},
		{"arm augmenter undefined", "experiment: {arms: [{name: a, weight: 1, augmenter: none}, {name: b, weight: 1, augmenter: camx}]}", "experiment.arms[1].augmenter", `"camx" is not defined in augmenters`},
		{"arm augmenter missing", "experiment: {arms: [{name: a, weight: 1}]}", "experiment.arms[0].augmenter", "required"},
		{"arm placement", "experiment: {arms: [{name: a, weight: 1, augmenter: none, placement: {mode: sideways}}]}", "experiment.arms[0].placement.mode", ""},
		{"cache entries", "cache: {local_entries: -1}", "cache.local_entries", ">= 0"},
		{"cache ttl", "cache: {ttl: 0s}", "cache.ttl", ""},
		{"cache redis scheme", "cache: {redis_url: 'http://localhost:6379'}", "cache.redis_url", "redis://"},
		{"cache redis cluster db", "cache: {redis_url: 'redis://n1:7000/1?addr=n2:7000'}", "cache.redis_url", "only database 0"},
		{"cache redis cluster addr", "cache: {redis_url: 'redis://n1:7000?addr=n2'}", "cache.redis_url", "addr"},
		{"cache redis sentinel empty", "cache: {redis_url: 'redis://s1:26379?master_name='}", "cache.redis_url", "master_name is empty"},
		{"cache redis unknown option", "cache: {redis_url: 'redis://h:6379?stream=s'}", "cache.redis_url", "unexpected option: stream"},
		{"sink redis cluster db", "replay: {sinks: ['redis://n1:7000/1?stream=s&addr=n2:7000']}", "replay.sinks[0]", "only database 0"},
		{"sink redis no stream", "replay: {sinks: ['redis://h:6379/0']}", "replay.sinks[0]", "stream"},
		{"cache redis bad db", "cache: {redis_url: 'redis://localhost:6379/x'}", "cache.redis_url", "Redis URL"},
		{"episodes store", "episodes: {store: disk}", "episodes.store", "memory"},
		{"episodes redis without url", "episodes: {store: redis}", "episodes.redis_url", "required"},
		{"episodes redis url", "episodes: {redis_url: 'localhost'}", "episodes.redis_url", ""},
		{"episodes idle", "episodes: {idle_timeout: 0s}", "episodes.idle_timeout", ""},
		{"no sinks", "replay: {sinks: []}", "replay.sinks", "at least one"},
		{"sink scheme", "replay: {sinks: ['file:///tmp/r', 'kafka://broker/topic']}", "replay.sinks[1]", "kafka"},
		{"sink no scheme", "replay: {sinks: ['./replay']}", "replay.sinks[0]", "scheme"},
		{"sink file no path", "replay: {sinks: ['file://']}", "replay.sinks[0]", "directory"},
		{"sink s3 no bucket", "replay: {sinks: ['s3:///prefix']}", "replay.sinks[0]", "bucket"},
		{"sink redis no host", "replay: {sinks: ['redis:///0']}", "replay.sinks[0]", "host"},
		// Two that config check once accepted and serve refused (issue 27).
		{"sink file host", "replay: {sinks: ['file://myhost/data/replay']}", "replay.sinks[0]", `file URI host "myhost"`},
		{"sink s3 unknown parameter", "replay: {sinks: ['s3://bucket/p?foo=bar']}", "replay.sinks[0]", `unknown query parameter "foo"`},
		{"sinks scalar", "replay: {sinks: 'file:///tmp/r'}", "replay.sinks", "list"},
		{"queue", "replay: {queue: 0}", "replay.queue", "> 0"},
		{"max answer bytes", "replay: {max_answer_bytes: -1}", "replay.max_answer_bytes", ">= 0"},
		{"spool dir", "replay: {spool_dir: ''}", "replay.spool_dir", "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.doc), noEnv)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			keys := fieldKeys(err)
			if !slices.Contains(keys, tt.key) {
				t.Fatalf("error %q names keys %q, want %q", err, keys, tt.key)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestParseRAGAndPlaybook(t *testing.T) {
	// The files do not exist: that is reported by app.New at start, not by the config.
	doc := `
augmenters:
  kb: {type: rag, guidance_file: does/not/exist.jsonl}
  ace: {type: playbook, file: does/not/exist.txt}
experiment:
  arms:
    - {name: baseline, weight: 1, augmenter: none}
    - {name: rag, weight: 1, augmenter: kb}
    - {name: ace, weight: 1, augmenter: ace}
`
	cfg, err := Parse([]byte(doc), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	kb, ace := cfg.Augmenters["kb"], cfg.Augmenters["ace"]
	if kb.GuidanceFile != "does/not/exist.jsonl" || kb.TopK != 1 || kb.MinScore != 0 || kb.Embeddings != (Embeddings{}) ||
		kb.Timeout != 3*time.Second || kb.Breaker != (Breaker{Failures: 5, OpenFor: 30 * time.Second}) {
		t.Errorf("rag defaults: %+v", kb)
	}
	if ace.File != "does/not/exist.txt" || ace.TopN != 0 || ace.Timeout != 3*time.Second {
		t.Errorf("playbook defaults: %+v", ace)
	}
}

func TestManyProblemsAllReported(t *testing.T) {
	doc := `
server:
  listen: nope
  max_body_bytes: -5
  shutdown_grace: soon
upstreams:
  openai: {base_url: "api.openai.com"}
task:
  rules: [{regex: "no group"}]
placement: {mode: sideways}
augmenters:
  cam: {type: cam, max_tokens: 0, temperature: 3}
  rag: {type: rag, top_k: 0}
experiment:
  sticky: forever
  arms:
    - {name: baseline, weight: 1, augmenter: none}
    - {name: baseline, weight: 1, augmenter: camx}
cache: {ttl: 0s}
episodes: {store: redis}
replay: {sinks: ["ftp://x"], queue: 0}
`
	_, err := Parse([]byte(doc), noEnv)
	want := []string{
		"server.listen",
		"server.max_body_bytes",
		"server.shutdown_grace",
		"upstreams.openai.base_url",
		"task.rules[0].regex",
		"placement.mode",
		"augmenters.cam.max_tokens",
		"augmenters.cam.temperature",
		"augmenters.rag.guidance_file",
		"augmenters.rag.top_k",
		"experiment.sticky",
		"experiment.arms[1].name",
		"experiment.arms[1].augmenter",
		"cache.ttl",
		"episodes.redis_url",
		"replay.sinks[0]",
		"replay.queue",
	}
	got := fieldKeys(err)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("reported keys\n%q\nwant\n%q\nerror:\n%v", got, want, err)
	}
}

func TestParseRejectsMultipleDocuments(t *testing.T) {
	if _, err := Parse([]byte("server: {}\n---\ncache: {}\n"), noEnv); err == nil {
		t.Fatal("Parse accepted two documents")
	}
}

func TestParseSyntaxError(t *testing.T) {
	_, err := Parse([]byte("server:\n  listen: [\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "invalid YAML") {
		t.Fatalf("error = %v, want an invalid YAML error", err)
	}
}

func TestParseAnchorsAndMerge(t *testing.T) {
	doc := `
augmenters:
  base: &base {type: cam, model: shared, timeout: 4s}
  fast:
    <<: *base
    timeout: 1s
experiment:
  arms:
    - {name: a, weight: 1, augmenter: base}
    - {name: b, weight: 1, augmenter: fast}
`
	cfg, err := Parse([]byte(doc), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	fast := cfg.Augmenters["fast"]
	if fast.Model != "shared" || fast.Timeout != time.Second || fast.MaxTokens != 512 {
		t.Errorf("fast = %+v; want model shared, timeout 1s, max_tokens 512", fast)
	}
	_, err = Parse([]byte("base: &b {typo: 1}\nserver:\n  <<: *b\n"), noEnv)
	if keys := fieldKeys(err); !slices.Contains(keys, "server.typo") {
		t.Errorf("merged unknown key not reported; keys = %q (error %v)", keys, err)
	}
}

func TestListsAndMapsReplaceDefaults(t *testing.T) {
	doc := `
task: {rules: [{regex: "Task: (.+)"}]}
replay: {sinks: ["s3://bucket/prefix"]}
placement: {mode: new_message}
`
	cfg, err := Parse([]byte(doc), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(cfg.Task.Rules) != 1 || cfg.Task.Rules[0].Regex != "Task: (.+)" {
		t.Errorf("task.rules = %+v, want only the file's rule", cfg.Task.Rules)
	}
	if !slices.Equal(cfg.Replay.Sinks, []string{"s3://bucket/prefix"}) {
		t.Errorf("replay.sinks = %q", cfg.Replay.Sinks)
	}
	if cfg.Placement.Template != Default().Placement.Template {
		t.Errorf("placement.template = %q, want the default kept", cfg.Placement.Template)
	}
}

func TestTaskCompile(t *testing.T) {
	rules, err := Task{Rules: []TaskRule{{Regex: `Task: (.+)`}, {FirstUserMessage: true}}}.Compile()
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if len(rules) != 2 || rules[0].Regex == nil || rules[0].Regex.FindStringSubmatch("Task: fix it")[1] != "fix it" || !rules[1].FirstUserMessage {
		t.Errorf("Compile = %+v", rules)
	}
	no := false
	rules, err = Task{Rules: []TaskRule{
		{LastUserMessage: true, Skip: []string{`^<recommended`}, Strip: []string{`\[ref:\d+\]`}, Envelopes: &no},
		{JSONPath: "metadata.task"},
	}}.Compile()
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if r := rules[0]; !r.LastUserMessage || len(r.Skip) != 1 || !r.Skip[0].MatchString("<recommended_plugins>") ||
		len(r.Strip) != 1 || r.Strip[0].ReplaceAllString("a[ref:12]b", "") != "ab" || !r.NoEnvelopes {
		t.Errorf("rule 0 = %+v", r)
	}
	if r := rules[1]; r.JSONPath != "metadata.task" || r.NoEnvelopes {
		t.Errorf("rule 1 = %+v, want the json path with envelopes on by default", r)
	}
	_, err = Task{Rules: []TaskRule{{Regex: `(`}, {}}}.Compile()
	if keys := fieldKeys(err); !slices.Equal(keys, []string{"task.rules[0].regex", "task.rules[1]"}) {
		t.Errorf("Compile error keys = %q, want both rules", keys)
	}
}

// TestRedisURLForms: every form go-redis's universal client takes is accepted for
// the cache, the episode store, a replay sink and the learner's store.
func TestRedisURLForms(t *testing.T) {
	for _, u := range []string{
		"redis://localhost:6379/0",
		"rediss://app:secret@cache.example.com:6380/2",
		"redis://:pw@n1:7000?addr=n2:7000&addr=n3:7000",
		"rediss://u:pw@n1:7000?addr=n2:7000&dial_timeout=2s",
		"redis://s:spw@s1:26379/0?master_name=mymaster&addr=s2:26379&addr=s3:26379&password=mpw",
	} {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		cfg := Default()
		cfg.Cache.RedisURL = u
		cfg.Episodes.Store, cfg.Episodes.RedisURL = StoreRedis, u
		cfg.Replay.Sinks = append(cfg.Replay.Sinks, u+sep+"stream=camproxy:replay")
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestEffectiveRedisURL(t *testing.T) {
	c := Cache{RedisURL: "redis://cache:6379"}
	if got := (Episodes{}).EffectiveRedisURL(c); got != c.RedisURL {
		t.Errorf("fallback = %q", got)
	}
	if got := (Episodes{RedisURL: "redis://ep:6379"}).EffectiveRedisURL(c); got != "redis://ep:6379" {
		t.Errorf("own = %q", got)
	}
}

func TestRedacted(t *testing.T) {
	orig := fullConfig()
	before := fullConfig()
	orig.Admin.Token, before.Admin.Token = "admin-token-0123456789", "admin-token-0123456789"
	orig.Tracing.Headers, before.Tracing.Headers = map[string]string{"x-honeycomb-team": "hc-key"}, map[string]string{"x-honeycomb-team": "hc-key"}
	r := orig.Redacted()
	if !reflect.DeepEqual(orig, before) {
		t.Fatal("Redacted changed the original")
	}
	checks := []struct{ name, got, want string }{
		{"openai api_key", r.Upstreams["openai"].APIKey, "****"},
		{"anthropic api_key", r.Upstreams["anthropic"].APIKey, "****"},
		{"gemini api_key", r.Upstreams["gemini"].APIKey, "****"},
		{"azure api_key", r.Upstreams["azure"].APIKey, "****"},
		{"cam api_key", r.Augmenters["cam"].APIKey, "****"},
		{"cam-small api_key (unset)", r.Augmenters["cam-small"].APIKey, ""},
		{"rag embeddings api_key", r.Augmenters["rag"].Embeddings.APIKey, "****"},
		{"cache redis_url", r.Cache.RedisURL, "redis://:****@redis.internal:6379/1"},
		{"episodes redis_url", r.Episodes.RedisURL, "rediss://camproxy:****@episodes.internal:6380/0"},
		{"redis sink", r.Replay.Sinks[1], "redis://:****@redis.internal:6379/0?stream=camproxy:replay"},
		{"file sink", r.Replay.Sinks[0], "file:///var/lib/camproxy/replay"},
		{"base_url", r.Upstreams["openai"].BaseURL, "https://openai.example.com"},
		{"admin token", r.Admin.Token, "****"},
		{"tracing header", r.Tracing.Headers["x-honeycomb-team"], "****"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if err := r.Validate(); err != nil {
		t.Errorf("redacted config no longer validates: %v", err)
	}
	// The copy is deep: changing it leaves the original alone.
	r.Augmenters["cam"].ExtraBody["chat_template_kwargs"].(map[string]any)["enable_thinking"] = true
	r.Experiment.Arms[1].Placement.Mode = "system"
	r.Task.Rules[0].Regex = "changed"
	if !reflect.DeepEqual(orig, before) {
		t.Error("changing the redacted copy changed the original")
	}
}

func TestFieldErrorMessage(t *testing.T) {
	e := &FieldError{Key: "experiment.arms[1].augmenter", Msg: `"camx" is not defined in augmenters`}
	if got, want := e.Error(), `experiment.arms[1].augmenter: "camx" is not defined in augmenters`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var fe *FieldError
	_, err := Parse([]byte("server: {listn: x}"), noEnv)
	if !errors.As(err, &fe) || fe.Key != "server.listn" || fe.Line != 1 || fe.Column != 10 ||
		fe.Error() != "line 1, column 10: server.listn: unknown key; did you mean server.listen?" {
		t.Errorf("errors.As = %v", fe)
	}
}

func FuzzParse(f *testing.F) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte(""))
	f.Add([]byte("augmenters: {cam: {type: cam}}\nexperiment: {arms: [{name: a, weight: 1, augmenter: cam}]}"))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("server:\n  listen: x\n\t admin_listen: [y\n"))
	f.Add([]byte("server: {listen: ${X:-:80}, <<: {admin_listen: ':81'}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, env(map[string]string{"X": ":8080"}))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		if _, err := cfg.Task.Compile(); err != nil {
			t.Fatalf("Parse accepted task rules that do not compile: %v", err)
		}
		if err := cfg.Redacted().Validate(); err != nil {
			t.Fatalf("Redacted config does not validate: %v", err)
		}
	})
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://user@localhost:6379", "redis://user@localhost:6379"},
		{"redis://user:pw@localhost:6379/0?x=1", "redis://user:****@localhost:6379/0?x=1"},
		{"https://u:p@cam.example.com/v1", "https://u:****@cam.example.com/v1"},
		{"redis://:p%zz@host", "****"}, // does not parse; may hold a password
		{"redis://s:spw@s1:26379/0?master_name=m&password=mpw", "redis://s:****@s1:26379/0?master_name=m&password=****"},
		{"http://[::1", "http://[::1"}, // does not parse; no credentials
	} {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEnvExpansionSkipsComments(t *testing.T) {
	doc := "# api_key: ${UNSET_IN_COMMENT}\nupstreams:\n  openai:\n    # old: ${ALSO_UNSET}\n    api_key: \"${KEY}\"\n"
	cfg, err := Parse([]byte(doc), env(map[string]string{"KEY": "sk-9"}))
	if err != nil {
		t.Fatalf("a commented-out ${VAR} must not fail: %v", err)
	}
	if cfg.Upstreams["openai"].APIKey != "sk-9" {
		t.Fatalf("api_key = %q", cfg.Upstreams["openai"].APIKey)
	}
	_, err = Parse([]byte("# comment\n\nupstreams:\n  openai:\n    api_key: \"${NOPE}\"\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Fatalf("line numbers after a comment: %v", err)
	}
}

// TestDefaultsAreLoopback (issue 18, 8): with no config both planes answer this
// host only; other hosts are an explicit choice.
func TestDefaultsAreLoopback(t *testing.T) {
	d := Default()
	if d.Server.Listen != "127.0.0.1:8080" || d.Server.AdminListen != "127.0.0.1:9090" || d.Admin != (Admin{Pprof: true}) {
		t.Fatalf("defaults: listen %q admin_listen %q admin %+v", d.Server.Listen, d.Server.AdminListen, d.Admin)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "127.9.9.9:1": true, "[::1]:1": true, "localhost:1": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:1": true, ":1": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "example.com:1": false, "nonsense": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %v", addr, !want)
		}
	}
}

// TestSideCallsValidate: every problem of every side-call rule is reported, each
// naming its key; a good rule compiles after the built-in signatures.
func TestSideCallsValidate(t *testing.T) {
	c := Default()
	c.SideCalls.Rules = []SideCallRule{
		{Tools: "none"},                            // no condition but tools
		{Model: "[", Tools: "maybe"},               // bad glob, bad tools
		{Match: "(", Quote: "x", Reason: "Title!"}, // bad regex, quote without group, bad label
		{MaxTokens: -1},
		{Model: "*haiku*", Tools: "none", Match: "title"}, // good
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad side-call rules")
	}
	for _, want := range []string{
		"side_calls.rules[0]: set at least one of model, match and max_tokens",
		"side_calls.rules[1].model: is not a glob",
		"side_calls.rules[1].tools: must be any, none or some",
		"side_calls.rules[2].match: does not compile",
		"side_calls.rules[2].quote: must have exactly one capture group",
		"side_calls.rules[2].reason: must be 1-64 characters",
		"side_calls.rules[3].max_tokens: must be positive",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "side_calls.rules[4]") {
		t.Errorf("the good rule was reported: %v", err)
	}
	c.SideCalls.Rules = c.SideCalls.Rules[4:]
	rules, err := c.SideCalls.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rules); n < 2 || rules[n-1].Source != "side_calls.rules[0]" || rules[n-1].Reason != "custom" || rules[0].Source == "side_calls.rules[0]" {
		t.Errorf("compiled rules: %+v", rules)
	}
	c.SideCalls.Builtin = false
	if rules, _ := c.SideCalls.Compile(); len(rules) != 1 {
		t.Errorf("builtin: false still has %d rules", len(rules))
	}
}

// upstreams.openai.websocket takes auto (the default) and YAML's true and false,
// bare or quoted.
func TestWebSocketMode(t *testing.T) {
	for doc, want := range map[string]string{
		"":                                       "auto",
		"upstreams: {openai: {websocket: true}}": "true",
		"upstreams: {openai: {websocket: false}}":   "false",
		"upstreams: {openai: {websocket: 'false'}}": "false",
		"upstreams: {openai: {websocket: auto}}":    "auto",
		"upstreams: {anthropic: {api_key: k}}":      "auto",
	} {
		cfg, err := Parse([]byte(doc), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := cfg.Upstreams["openai"].WebSocket; got != want {
			t.Errorf("%q: websocket %q, want %q", doc, got, want)
		}
	}
}

// TestUpstreamsFromRegistry: every provider in the registry has a block with its
// defaults, a file's block is decoded over them (one key given, the rest kept), and
// the three keys that were struct fields read as before.
func TestUpstreamsFromRegistry(t *testing.T) {
	def := Default()
	for _, p := range registry.Providers {
		b := def.Upstreams[p.Name]
		if b == nil {
			t.Fatalf("Default() has no upstreams.%s", p.Name)
		}
		if b.BaseURL != p.BaseURL || b.FirstByteTimeout <= 0 || b.IdleTimeout <= 0 {
			t.Errorf("upstreams.%s defaults %+v", p.Name, *b)
		}
	}
	cfg, err := Parse([]byte(`
upstreams:
  openai: {api_key: sk-1}
  bedrock: {endpoint: "http://127.0.0.1:9"}
  gemini: &g {first_byte_timeout: 2s}
  anthropic: *g
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Upstreams
	if got := u["openai"]; got.APIKey != "sk-1" || got.BaseURL != "https://api.openai.com" || got.WebSocket != "auto" || got.IdleTimeout != 5*time.Minute {
		t.Errorf("openai = %+v", *got)
	}
	if got := u["bedrock"]; got.Region != "us-east-1" || got.Endpoint != "http://127.0.0.1:9" {
		t.Errorf("bedrock = %+v", *got)
	}
	if u["gemini"].FirstByteTimeout != 2*time.Second || u["anthropic"].FirstByteTimeout != 2*time.Second ||
		u["anthropic"].BaseURL != "https://api.anthropic.com" {
		t.Errorf("gemini %+v anthropic %+v", *u["gemini"], *u["anthropic"])
	}
	if def.Upstreams["openai"].APIKey != "" {
		t.Error("parsing changed Default()'s blocks")
	}
	if got := (Upstreams{}).Get("gemini"); got.BaseURL != registry.Google.BaseURL {
		t.Errorf("Get on an empty map = %+v", got)
	}
}
