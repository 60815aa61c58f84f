package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/camproxy/camproxy/internal/redisx"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/replay/location"
)

// FieldError is one problem with one config key.
type FieldError struct {
	Key string // dotted path, e.g. "experiment.arms[1].augmenter"; "" for the whole document
	Msg string
	// Line and Column (1-based) are where the file sets the key (its value, or the key
	// itself when the key is what is wrong); 0 when the file does not set it — a
	// default, or a Config built in code.
	Line, Column int
}

// Error reads "line 7, column 3: admin.tokne: unknown key; did you mean admin.token?",
// the position left out when it is not known.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// problems collects field errors.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Validate reports every problem in c, as errors.Join of *FieldError.
func (c *Config) Validate() error {
	return errors.Join(c.validate()...)
}

func (c *Config) validate() []error {
	var p problems
	c.Server.check(&p)
	c.Upstreams.check(&p)
	c.Task.compile(&p)
	c.SideCalls.compile(&p)
	c.Placement.check(&p, "placement")
	c.checkAugmenters(&p)
	if len(c.Experiments) > 0 {
		c.checkExperiments(&p)
	} else {
		c.Experiment.checkSingle(&p)
		c.Experiment.check(&p, c.Augmenters)
	}
	c.Cache.check(&p)
	c.Episodes.check(&p, c.Cache)
	c.Replay.check(&p)
	c.Rollouts.check(&p)
	c.Tracing.check(&p)
	if len(c.Experiments) == 0 {
		c.checkLearn(&p)
	} else if c.Learn.Enabled {
		p.add("learn.enabled", "with experiments, each experiment has a learn of its own (experiments[i].learn, with its own store): move it there")
	}
	// mask is what Redacted leaves: a printed config still validates.
	if t := c.Admin.Token; t != "" && t != mask && (len(t) < 16 || strings.TrimSpace(t) != t) {
		p.add("admin.token", "must be at least 16 characters without surrounding spaces (got %d characters)", len(t))
	}
	if err := c.AdminExposure(); err != nil {
		p = append(p, err)
	}
	return p
}

// AdminExposure refuses an admin plane other hosts reach with no token and no
// setting that says why that is safe: its API holds task texts, contexts and
// episodes, and takes feedback and rollouts.
func (c *Config) AdminExposure() error {
	a, addr := c.Admin, c.Server.AdminListen
	if a.Token != "" || a.LoopbackOnly || a.AllowUnauthenticated || IsLoopback(addr) {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil // checkListen reports it
	}
	return &FieldError{Key: "server.admin_listen", Msg: fmt.Sprintf("%q is reachable from other hosts and admin.token is not set: "+
		"the admin API (tasks, contexts, episodes, feedback, rollouts) would answer anyone. Set admin.token "+
		"(e.g. token: \"${CAMPROXY_ADMIN_TOKEN}\", 16+ characters), or bind server.admin_listen to 127.0.0.1:PORT, "+
		"or set admin.loopback_only: true (probes and /metrics from anywhere, the API from this host only); "+
		"admin.allow_unauthenticated: true opens it to every host", addr)}
}

// AdminOpen reports that the admin API answers every host without a token (the
// allow_unauthenticated opt-out on a non-loopback address): start-up warns of it.
func (c *Config) AdminOpen() bool {
	a := c.Admin
	return a.Token == "" && a.AllowUnauthenticated && !a.LoopbackOnly && !IsLoopback(c.Server.AdminListen)
}

// IsLoopback reports whether the host of addr (host:port) is a loopback address or
// "localhost": only this host's processes reach a listener there. An empty host
// binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (s Server) check(p *problems) {
	listen := checkListen(p, "server.listen", s.Listen)
	admin := checkListen(p, "server.admin_listen", s.AdminListen)
	if listen && admin && s.Listen == s.AdminListen && !strings.HasSuffix(s.Listen, ":0") {
		p.add("server.admin_listen", "must differ from server.listen (%q)", s.Listen)
	}
	if s.MaxBodyBytes <= 0 {
		p.add("server.max_body_bytes", "must be > 0, got %d", s.MaxBodyBytes)
	}
	checkPositive(p, "server.shutdown_grace", s.ShutdownGrace)
	checkPositive(p, "server.read_timeout", s.ReadTimeout)
	checkPositive(p, "server.idle_timeout", s.IdleTimeout)
	if s.MaxInFlight < 0 {
		p.add("server.max_in_flight", "must be >= 0 (0 = derived from GOMAXPROCS), got %d", s.MaxInFlight)
	}
	if s.QueueTimeout < 0 {
		p.add("server.queue_timeout", "must be >= 0 (0 = refuse at once past server.max_in_flight), got %v", s.QueueTimeout)
	}
}

// check validates each provider's block by what its registry entry says of it: a
// base URL it needs (or may go without), its timeouts, its websocket mode.
func (u Upstreams) check(p *problems) {
	for name, b := range u {
		prov := registry.ProviderNamed(name)
		if prov == nil {
			p.add("upstreams."+name, "unknown provider; the providers are %s", strings.Join(registry.ProviderNames(), ", "))
			continue
		}
		b.check(p, prov, "upstreams."+name)
	}
}

func (u *Upstream) check(p *problems, prov *registry.Provider, key string) {
	takes := func(k string) bool { return slices.Contains(prov.Keys, k) }
	switch {
	case !takes("base_url"):
	case !prov.OptionalBase() || u.BaseURL != "":
		checkHTTPURL(p, key+".base_url", u.BaseURL)
	case u.APIKey != "":
		p.add(key+".api_key", "set %s.base_url too: the key is for that endpoint", key)
	}
	if takes("endpoint") && u.Endpoint != "" {
		checkHTTPURL(p, key+".endpoint", u.Endpoint)
	}
	checkPositive(p, key+".first_byte_timeout", u.FirstByteTimeout)
	checkPositive(p, key+".idle_timeout", u.IdleTimeout)
	switch u.WebSocket {
	case "auto", "true", "false", "": // "": a config built in code; auto
	default:
		p.add(key+".websocket", "must be auto, true or false, got %q", u.WebSocket)
	}
}

// Compile turns side_calls into the protocol's rules, the built-in ones first. Its
// error is errors.Join of a *FieldError per problem.
func (sc SideCalls) Compile() ([]protocol.SideCallRule, error) {
	var p problems
	rules := sc.compile(&p)
	if len(p) > 0 {
		return nil, errors.Join(p...)
	}
	return rules, nil
}

func (sc SideCalls) compile(p *problems) []protocol.SideCallRule {
	var rules []protocol.SideCallRule
	if sc.Builtin {
		rules = protocol.BuiltinSideCalls()
	}
	for i, r := range sc.Rules {
		key := fmt.Sprintf("side_calls.rules[%d]", i)
		n0 := len(*p)
		rule := protocol.SideCallRule{Source: key, Reason: r.Reason, Model: r.Model, MaxTokens: r.MaxTokens}
		if rule.Reason == "" {
			rule.Reason = "custom"
		} else if !validLabel(r.Reason) {
			p.add(key+".reason", "must be 1-64 characters of a-z 0-9 _ - (a metric label), got %q", r.Reason)
		}
		if r.Model == "" && r.Match == "" && r.MaxTokens == 0 {
			p.add(key, "set at least one of model, match and max_tokens (tools alone would take every call without tools)")
		}
		if r.Model != "" {
			if _, err := path.Match(r.Model, ""); err != nil {
				p.add(key+".model", "is not a glob: %v", err)
			}
		}
		switch r.Tools {
		case "", "any":
			rule.Tools = protocol.ToolsAny
		case protocol.ToolsNone, protocol.ToolsSome:
			rule.Tools = r.Tools
		default:
			p.add(key+".tools", "must be any, none or some, got %q", r.Tools)
		}
		if r.MaxTokens < 0 {
			p.add(key+".max_tokens", "must be positive (or 0: any), got %d", r.MaxTokens)
		}
		if r.Match != "" {
			re, err := regexp.Compile(r.Match)
			if err != nil {
				p.add(key+".match", "does not compile: %v", err)
			}
			rule.Match = re
		}
		if r.Quote != "" {
			re, err := regexp.Compile(r.Quote)
			switch {
			case err != nil:
				p.add(key+".quote", "does not compile: %v", err)
			case re.NumSubexp() != 1:
				p.add(key+".quote", "must have exactly one capture group (the quoted request), has %d", re.NumSubexp())
			}
			rule.Quote = re
		}
		if len(*p) == n0 {
			rules = append(rules, rule)
		}
	}
	return rules
}

// validLabel reports whether s may be a side call's reason: a short metric label.
func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Compile turns the task rules into protocol rules. Its error is errors.Join of
// a *FieldError per bad rule.
func (t Task) Compile() ([]protocol.TaskRule, error) {
	var p problems
	rules := t.compile(&p)
	if len(p) > 0 {
		return nil, errors.Join(p...)
	}
	return rules, nil
}

func (t Task) compile(p *problems) []protocol.TaskRule {
	if len(t.Rules) == 0 {
		p.add("task.rules", "at least one rule is required, e.g. {first_user_message: true}")
		return nil
	}
	rules := make([]protocol.TaskRule, 0, len(t.Rules))
	for i, r := range t.Rules {
		key := fmt.Sprintf("task.rules[%d]", i)
		if rule, ok := r.compile(p, key); ok {
			rules = append(rules, rule.Labelled(i)) // named once, not per call
		}
	}
	return rules
}

// compile checks one rule; ok is false when it has a problem (added to p).
func (r TaskRule) compile(p *problems, key string) (protocol.TaskRule, bool) {
	n0 := len(*p)
	var rule protocol.TaskRule
	set := 0
	if r.Regex != "" {
		set++
	}
	for _, b := range []bool{r.FirstUserMessage, r.LastUserMessage, r.JSONPath != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		p.add(key, "set exactly one of regex, first_user_message, last_user_message and json_path")
	}
	switch {
	case r.Regex != "":
		re, err := regexp.Compile(r.Regex)
		switch {
		case err != nil:
			p.add(key+".regex", "does not compile: %v", err)
		case re.NumSubexp() != 1:
			p.add(key+".regex", "must have exactly one capture group (the task), has %d", re.NumSubexp())
		default:
			rule.Regex = re
		}
	case r.JSONPath != "":
		if strings.TrimSpace(r.JSONPath) != r.JSONPath {
			p.add(key+".json_path", "has spaces at its ends: %q", r.JSONPath)
		}
		rule.JSONPath = r.JSONPath
	}
	rule.FirstUserMessage, rule.LastUserMessage = r.FirstUserMessage, r.LastUserMessage
	rule.Skip = compilePatterns(p, key+".skip", r.Skip)
	rule.Strip = compilePatterns(p, key+".strip", r.Strip)
	rule.NoEnvelopes = r.Envelopes != nil && !*r.Envelopes
	return rule, len(*p) == n0
}

// compilePatterns compiles a list of regular expressions, naming each bad one.
func compilePatterns(p *problems, key string, pats []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for j, pat := range pats {
		if pat == "" {
			p.add(fmt.Sprintf("%s[%d]", key, j), "is empty; give a pattern")
			continue
		}
		re, err := regexp.Compile(pat)
		if err != nil {
			p.add(fmt.Sprintf("%s[%d]", key, j), "does not compile: %v", err)
			continue
		}
		out = append(out, re)
	}
	return out
}

func (pl Placement) check(p *problems, key string) {
	switch protocol.Placement(pl.Mode) {
	case protocol.AppendToTask, protocol.System, protocol.NewMessage:
	default:
		p.add(key+".mode", "%q is not a placement mode; supported: %s, %s, %s",
			pl.Mode, protocol.AppendToTask, protocol.System, protocol.NewMessage)
	}
	if !strings.Contains(pl.Template, ContextPlaceholder) {
		p.add(key+".template", "must contain %s", ContextPlaceholder)
	}
}

func (c *Config) checkAugmenters(p *problems) {
	for _, name := range slices.Sorted(maps.Keys(c.Augmenters)) {
		key := "augmenters." + name
		switch {
		case name == AugmenterNone:
			p.add(key, "%q is reserved for arms without an augmenter", AugmenterNone)
		case !isAugmenterName(name):
			p.add(key, "name must match ^[a-z0-9][a-z0-9_-]*$")
		}
		c.Augmenters[name].check(p, key)
	}
}

// augmenterTypes lists the supported augmenter types, for messages.
const augmenterTypes = AugmenterCAM + ", " + AugmenterRAG + ", " + AugmenterPlaybook

func (a Augmenter) check(p *problems, key string) {
	switch a.Type {
	case AugmenterCAM:
		a.checkCAM(p, key)
	case AugmenterRAG:
		a.checkRAG(p, key)
	case AugmenterPlaybook:
		a.checkPlaybook(p, key)
	case "":
		p.add(key+".type", "required; supported: %s", augmenterTypes)
		return
	default:
		p.add(key+".type", "%q is not an augmenter type; supported: %s", a.Type, augmenterTypes)
		return
	}
	checkPositive(p, key+".timeout", a.Timeout)
	if a.Breaker.Failures < 1 {
		p.add(key+".breaker.failures", "must be >= 1")
	}
	checkPositive(p, key+".breaker.open_for", a.Breaker.OpenFor)
}

func (a Augmenter) checkRAG(p *problems, key string) {
	// An unreadable file is not a config error: app.New reports it at start.
	if a.GuidanceFile == "" {
		p.add(key+".guidance_file", "required: a JSON Lines file of {task_id, task_description, guidance}")
	}
	if a.TopK < 1 {
		p.add(key+".top_k", "must be >= 1, got %d", a.TopK)
	}
	if math.IsNaN(a.MinScore) || math.IsInf(a.MinScore, 0) {
		p.add(key+".min_score", "must be a finite number, got %v", a.MinScore)
	}
	e := a.Embeddings
	switch {
	case e.BaseURL != "":
		checkHTTPURL(p, key+".embeddings.base_url", e.BaseURL)
		if e.Model == "" {
			p.add(key+".embeddings.model", "required when embeddings.base_url is set")
		}
	case e.Model != "" || e.APIKey != "":
		p.add(key+".embeddings.base_url", "required when embeddings.model or api_key is set (or remove them for BM25)")
	}
}

func (a Augmenter) checkPlaybook(p *problems, key string) {
	// An unreadable file is not a config error: app.New reports it at start.
	if a.File == "" {
		p.add(key+".file", "required: the playbook file (ACE text or RCL JSON)")
	}
	if a.TopN < 0 {
		p.add(key+".top_n", "must be >= 0 (0 = every bullet), got %d", a.TopN)
	}
}

func (a Augmenter) checkCAM(p *problems, key string) {
	checkHTTPURL(p, key+".base_url", a.BaseURL)
	if a.Model == "" {
		p.add(key+".model", "required")
	}
	if a.MaxTokens <= 0 {
		p.add(key+".max_tokens", "must be > 0, got %d", a.MaxTokens)
	}
	if !(a.Temperature >= 0 && a.Temperature <= 2) {
		p.add(key+".temperature", "must be within [0, 2], got %v", a.Temperature)
	}
	if !strings.Contains(a.UserTemplate, TaskPlaceholder) {
		p.add(key+".user_template", "must contain %s", TaskPlaceholder)
	}
	if _, err := json.Marshal(a.ExtraBody); err != nil {
		p.add(key+".extra_body", "must be JSON-compatible (string keys, finite numbers): %v", err)
	}
}

func (e Experiment) check(p *problems, augmenters map[string]Augmenter) {
	if e.Name == "" {
		p.add("experiment.name", "required")
	}
	if e.Sticky != StickyEpisode && e.Sticky != StickyTask {
		p.add("experiment.sticky", "%q is not supported; supported: %s, %s", e.Sticky, StickyEpisode, StickyTask)
	}
	if len(e.Arms) == 0 {
		p.add("experiment.arms", "at least one arm is required")
		return
	}
	seen := map[string]int{}
	var (
		sum       float64
		badWeight bool
	)
	for i, arm := range e.Arms {
		key := fmt.Sprintf("experiment.arms[%d]", i)
		switch j, dup := seen[arm.Name]; {
		case arm.Name == "":
			p.add(key+".name", "required")
		case !isArmName(arm.Name):
			p.add(key+".name", "%q must be printable ASCII without spaces", arm.Name)
		case dup:
			p.add(key+".name", "%q is already the name of experiment.arms[%d]", arm.Name, j)
		default:
			seen[arm.Name] = i
		}
		if !(arm.Weight >= 0) || math.IsInf(arm.Weight, 1) {
			p.add(key+".weight", "must be a finite number >= 0, got %v", arm.Weight)
			badWeight = true
		} else {
			sum += arm.Weight
		}
		if _, ok := augmenters[arm.Augmenter]; !ok && arm.Augmenter != AugmenterNone {
			if arm.Augmenter == "" {
				p.add(key+".augmenter", "required: %q or a key of augmenters", AugmenterNone)
			} else {
				p.add(key+".augmenter", "%q is not defined in augmenters", arm.Augmenter)
			}
		}
		if arm.Placement != nil {
			arm.Placement.check(p, key+".placement")
		}
	}
	if !badWeight && (sum <= 0 || math.IsInf(sum, 1)) {
		p.add("experiment.arms", "the weights must sum to a finite number > 0")
	}
	e.Adaptive.check(p, seen, len(e.Arms))
}

// checkSingle refuses the list form's keys in the one-experiment form.
func (e Experiment) checkSingle(p *problems) {
	if !e.Match.Empty() {
		p.add("experiment.match", "applies to experiments entries only: the one experiment takes every call")
	}
	if e.Task != nil {
		p.add("experiment.task", "applies to experiments entries only: use the top-level task")
	}
	if e.Learn != nil {
		p.add("experiment.learn", "applies to experiments entries only: use the top-level learn")
	}
}

// checkExperiments checks the list form: each entry as the one experiment of its own
// config (PerExperiment's view; its problems named under experiments[i]), plus what
// only a list can get wrong — names, matches that shadow the rest, shared stores.
func (c *Config) checkExperiments(p *problems) {
	names := map[string]int{}
	stores, guidance := map[string]int{}, map[string]int{}
	for i, e := range c.Experiments {
		key := fmt.Sprintf("experiments[%d]", i)
		switch j, dup := names[e.Name]; {
		case e.Name == "":
			p.add(key+".name", "required")
		case !validLabel(e.Name):
			p.add(key+".name", "must be 1-64 characters of a-z 0-9 _ - (a metric label), got %q", e.Name)
		case dup:
			p.add(key+".name", "%q is already the name of experiments[%d]", e.Name, j)
		default:
			names[e.Name] = i
		}
		e.Match.check(p, key+".match")
		switch {
		case e.Name == DefaultExperimentName && !e.Match.Empty():
			p.add(key+".match", "the default experiment takes the calls no other matched: remove its match")
		case e.Name != DefaultExperimentName && e.Match.Empty() && (i < len(c.Experiments)-1 || c.hasDefault()):
			p.add(key+".match", "empty, so it takes every call and the experiments after it (and default) get none: give it match keys, or name it default")
		}
		v := c.view(e)
		var q problems
		v.Experiment.check(&q, c.Augmenters)
		if e.Task != nil {
			e.Task.compile(&q)
		}
		if v.Learn.Enabled {
			v.checkLearn(&q)
			if j, dup := stores[v.Learn.Store]; dup {
				q.add("learn.store", "is experiments[%d]'s store too: each learner needs its own (a directory, or a Redis ?prefix=)", j)
			}
			stores[v.Learn.Store] = i
			if g := v.Learn.GuidanceFile; g != "" {
				if j, dup := guidance[g]; dup {
					q.add("learn.guidance_file", "is experiments[%d]'s too: each learner appends its own experiment's guidance, so each needs its own file", j)
				}
				guidance[g] = i
			}
		}
		for _, err := range q {
			if fe, ok := err.(*FieldError); ok {
				fe.Key = key + "." + strings.TrimPrefix(fe.Key, "experiment.")
			}
			*p = append(*p, err)
		}
	}
}

func (c *Config) hasDefault() bool {
	return slices.ContainsFunc(c.Experiments, func(e Experiment) bool { return e.Name == DefaultExperimentName })
}

// check reports every match key that cannot match anything.
func (m Match) check(p *problems, key string) {
	for i, a := range m.Agents {
		if strings.TrimSpace(a) == "" {
			p.add(fmt.Sprintf("%s.agents[%d]", key, i), "empty")
		}
	}
	for i, f := range m.KeyFingerprints {
		if _, err := hex.DecodeString(padHex(f)); err != nil || len(f) < 8 || len(f) > 64 {
			p.add(fmt.Sprintf("%s.key_fingerprints[%d]", key, i), "must be 8-64 hex digits of a key's sha256 (camproxy key fingerprint prints one), got %q", f)
		}
	}
	for i, pr := range m.Protocols {
		if registry.ByExplain(pr) == nil {
			p.add(fmt.Sprintf("%s.protocols[%d]", key, i), "%q is not a protocol; the protocols are %s", pr, strings.Join(registry.ExplainNames(), ", "))
		}
	}
	for field, globs := range map[string][]string{"paths": m.Paths, "models": m.Models} {
		for i, g := range globs {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				p.add(fmt.Sprintf("%s.%s[%d]", key, field, i), "%q is not a glob", g)
			}
		}
	}
	if m.Task != "" {
		if _, err := regexp.Compile(m.Task); err != nil {
			p.add(key+".task", "is not a regexp: %v", err)
		}
	}
}

// padHex makes an odd-length hex prefix decodable.
func padHex(s string) string {
	if len(s)%2 == 1 {
		return s + "0"
	}
	return s
}

func (a Adaptive) check(p *problems, arms map[string]int, n int) {
	checkPositive(p, "experiment.adaptive.update_period", a.UpdatePeriod)
	if !(a.MinShare >= 0) || a.MinShare*float64(n) > 1 {
		p.add("experiment.adaptive.min_share", "must be >= 0 and at most 1/%d (one share per arm), got %v", n, a.MinShare)
	}
	if !(a.Alpha > 0 && a.Alpha < 1) {
		p.add("experiment.adaptive.alpha", "must be between 0 and 1, got %v", a.Alpha)
	}
	if a.MinEpisodes < 0 {
		p.add("experiment.adaptive.min_episodes", "must be >= 0, got %d", a.MinEpisodes)
	}
	if _, ok := arms[a.Control]; a.Control != "" && !ok {
		p.add("experiment.adaptive.control", "%q is not an arm of the experiment", a.Control)
	}
}

func (c Cache) check(p *problems) {
	if c.LocalEntries < 0 {
		p.add("cache.local_entries", "must be >= 0, got %d", c.LocalEntries)
	}
	checkPositive(p, "cache.ttl", c.TTL)
	checkRedisURL(p, "cache.redis_url", c.RedisURL)
}

func (e Episodes) check(p *problems, c Cache) {
	checkPositive(p, "episodes.idle_timeout", e.IdleTimeout)
	switch e.Store {
	case StoreMemory:
	case StoreRedis:
		if e.EffectiveRedisURL(c) == "" {
			p.add("episodes.redis_url", "required when episodes.store is redis (or set cache.redis_url)")
		}
	default:
		p.add("episodes.store", "%q is not supported; supported: %s, %s", e.Store, StoreMemory, StoreRedis)
	}
	checkRedisURL(p, "episodes.redis_url", e.RedisURL)
}

func (r Rollouts) check(p *problems) {
	if r.Runner != "" {
		checkHTTPURL(p, "rollouts.runner", r.Runner)
	}
	if r.MaxInFlight < 1 {
		p.add("rollouts.max_in_flight", "must be >= 1, got %d", r.MaxInFlight)
	}
	checkPositive(p, "rollouts.default_timeout", r.DefaultTimeout)
	checkPositive(p, "rollouts.queue_timeout", r.QueueTimeout)
}

func (r Replay) check(p *problems) {
	if len(r.Sinks) == 0 {
		p.add("replay.sinks", "at least one sink is required, e.g. file://./camproxy-data/replay")
	}
	for i, sink := range r.Sinks {
		checkLocation(p, fmt.Sprintf("replay.sinks[%d]", i), sink, location.Parse)
	}
	if r.Queue <= 0 {
		p.add("replay.queue", "must be > 0, got %d", r.Queue)
	}
	if r.SpoolDir == "" {
		p.add("replay.spool_dir", "required")
	}
	if r.MaxAnswerBytes < 0 {
		p.add("replay.max_answer_bytes", "must be >= 0 (0: the default, 1048576), got %d", r.MaxAnswerBytes)
	}
}

// checkLocation adds what parse (location.Parse or ParseStore: the parser serve
// opens them with) finds wrong with a replay URI or a store location.
func checkLocation(p *problems, key, raw string, parse func(string) (*location.Spec, error)) {
	if _, err := parse(raw); err != nil {
		p.add(key, "%s", location.Reason(err))
	}
}

func checkListen(p *problems, key, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(key, "%q is not host:port, e.g. \"127.0.0.1:8080\" (this host only) or \"0.0.0.0:8080\" (every interface)", addr)
		return false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		p.add(key, "port %q is not a number from 0 to 65535", port)
		return false
	}
	return true
}

func checkHTTPURL(p *problems, key, raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		p.add(key, "required: an http(s) URL")
	case err != nil:
		p.add(key, "is not a URL: %v", redisx.URLError(err))
	case u.Scheme != "http" && u.Scheme != "https":
		p.add(key, "%q is not an absolute http(s) URL", redactURL(raw))
	case u.Host == "":
		p.add(key, "%q has no host", redactURL(raw))
	}
}

// checkRedisURL accepts "" or a Redis URL in any form redisx takes (single node,
// Cluster, Sentinel; redis:// or rediss://). Messages never quote the URL, which may
// hold a password.
func checkRedisURL(p *problems, key, raw string) {
	if raw == "" {
		return
	}
	if _, err := redisx.Parse(raw); err != nil {
		p.add(key, "%v", err)
	}
}

func checkPositive(p *problems, key string, d time.Duration) {
	if d <= 0 {
		p.add(key, "must be > 0, got %v", d)
	}
}

// isAugmenterName reports whether s matches ^[a-z0-9][a-z0-9_-]*$.
func isAugmenterName(s string) bool {
	for i, r := range s {
		ok := 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || i > 0 && (r == '_' || r == '-')
		if !ok {
			return false
		}
	}
	return s != ""
}

// isArmName reports whether s is printable ASCII without spaces, so it can go
// into a header and a metric label.
func isArmName(s string) bool {
	for _, r := range s {
		if r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}

func (t Tracing) check(p *problems) {
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("tracing.endpoint", "must be an http(s):// URL of an OTLP/HTTP receiver, e.g. http://otel-collector:4318")
		}
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		p.add("tracing.sample_ratio", "must be between 0 and 1, got %g", t.SampleRatio)
	}
	if t.ServiceName == "" {
		p.add("tracing.service_name", "must not be empty")
	}
}

// LearnArmPrefix names the learner's arms: learn-v2 serves playbook version 2.
const LearnArmPrefix = "learn-v"

// LearnChampion is the arm the learner starts from: learn.champion, else the
// adaptive control (experiment.adaptive.control, else the arm named baseline, else
// the first arm).
func (c *Config) LearnChampion() string {
	if c.Learn.Champion != "" {
		return c.Learn.Champion
	}
	return c.Experiment.Control()
}

// Control is the experiment's control arm: adaptive.control, else the arm named
// baseline, else the first arm ("" without arms). policies.NewAdaptive picks the same.
func (e Experiment) Control() string {
	if e.Adaptive.Control != "" {
		return e.Adaptive.Control
	}
	for _, a := range e.Arms {
		if a.Name == "baseline" {
			return a.Name
		}
	}
	if len(e.Arms) > 0 {
		return e.Arms[0].Name
	}
	return ""
}

// LearnFrom is the replay URI the learner reads: learn.from, else the first sink.
func (c *Config) LearnFrom() string {
	if c.Learn.From != "" || len(c.Replay.Sinks) == 0 {
		return c.Learn.From
	}
	return c.Replay.Sinks[0]
}

// checkLearn checks the learn section, only when it is enabled: a disabled learner's
// keys are not read.
func (c *Config) checkLearn(p *problems) {
	l := c.Learn
	if !l.Enabled {
		return
	}
	if l.Every < 1 {
		p.add("learn.every", "must be >= 1, got %d", l.Every)
	}
	if !(l.PromoteAlpha > 0 && l.PromoteAlpha < 0.5) {
		p.add("learn.promote_alpha", "must be between 0 and 0.5, got %v", l.PromoteAlpha)
	}
	if l.MaxCandidates < 1 {
		p.add("learn.max_candidates", "must be >= 1, got %d", l.MaxCandidates)
	} else if ms := c.Experiment.Adaptive.MinShare; ms*float64(len(c.Experiment.Arms)+l.MaxCandidates+1) > 1 {
		p.add("learn.max_candidates", "%d candidates, the champion and %d arms at experiment.adaptive.min_share %v each exceed 1; lower one of them",
			l.MaxCandidates, len(c.Experiment.Arms), ms)
	}
	if l.MinEpisodes < 1 {
		p.add("learn.min_episodes", "must be >= 1, got %d", l.MinEpisodes)
	}
	if l.MaxTrial < 0 || (l.MaxTrial > 0 && l.MaxTrial < l.MinEpisodes) {
		p.add("learn.max_trial", "must be 0 (never) or at least learn.min_episodes (%d), got %d", l.MinEpisodes, l.MaxTrial)
	}
	if l.GuidanceTasks < 0 {
		p.add("learn.guidance_tasks", "must be >= 0, got %d", l.GuidanceTasks)
	}

	checkLocation(p, "learn.store", l.Store, location.ParseStore)
	if l.From != "" {
		checkLocation(p, "learn.from", l.From, location.Parse)
	} else if len(c.Replay.Sinks) == 0 {
		p.add("learn.from", "required when replay.sinks is empty")
	}
	champion := c.LearnChampion()
	found := false
	for i, a := range c.Experiment.Arms {
		if strings.HasPrefix(a.Name, LearnArmPrefix) {
			p.add(fmt.Sprintf("experiment.arms[%d].name", i), "%q: names starting with %q are the learner's arms", a.Name, LearnArmPrefix)
		}
		if a.Name != champion {
			continue
		}
		found = true
		if a.Augmenter != AugmenterNone {
			if t := c.Augmenters[a.Augmenter].Type; t != AugmenterPlaybook && t != "" {
				p.add("learn.champion", "arm %q serves a %s augmenter; the learner starts from an arm with augmenter none (an empty playbook) or a playbook augmenter", champion, t)
			}
		}
	}
	if !found && champion != "" {
		p.add("learn.champion", "%q is not an arm of the experiment", champion)
	}
	models := []struct{ key, v string }{{"learn.model", l.Model}, {"learn.reflector_model", l.ReflectorModel}, {"learn.mutator_model", l.MutatorModel}}
	for i, m := range models {
		if m.v == "" {
			if i == 0 && (l.ReflectorModel == "" || l.MutatorModel == "") {
				p.add(m.key, "required: openai/NAME or bedrock/MODEL_ID (or set both reflector_model and mutator_model)")
			}
			continue
		}
		provider, name, ok := strings.Cut(m.v, "/")
		if !ok || name == "" || (provider != "openai" && provider != "bedrock") {
			p.add(m.key, "%q is not openai/NAME or bedrock/MODEL_ID", m.v)
		}
	}
	if l.BaseURL != "" {
		checkHTTPURL(p, "learn.base_url", l.BaseURL)
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"learn.batch_size", l.BatchSize}, {"learn.prune", l.Prune}, {"learn.max_entries", l.MaxEntries}, {"learn.top_n", l.TopN}} {
		if n.v < 0 {
			p.add(n.key, "must be >= 0, got %d", n.v)
		}
	}
	if l.MaxTurns < 1 {
		p.add("learn.max_turns", "must be >= 1, got %d", l.MaxTurns)
	}
	checkPositive(p, "learn.check_every", l.CheckEvery)
	checkPositive(p, "learn.lease_ttl", l.LeaseTTL)
	checkPositive(p, "learn.step_timeout", l.StepTimeout)
}
