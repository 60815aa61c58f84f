package config

import (
	"maps"
	"slices"

	"github.com/camproxy/camproxy/internal/redisx"
)

// mask is what Redacted puts in place of a secret.
const mask = "****"

// Redacted returns a deep copy of c that is safe to log: non-empty api_key
// values become "****", and so do the passwords in URLs (Redis URLs, replay
// sinks, base URLs). c is not changed.
func (c *Config) Redacted() *Config {
	r := c.clone()
	for _, u := range r.Upstreams {
		u.redact()
	}
	for name, a := range r.Augmenters {
		a.APIKey = maskSecret(a.APIKey)
		a.BaseURL = redactURL(a.BaseURL)
		a.Embeddings.APIKey = maskSecret(a.Embeddings.APIKey)
		a.Embeddings.BaseURL = redactURL(a.Embeddings.BaseURL)
		r.Augmenters[name] = a
	}
	r.Admin.Token = maskSecret(r.Admin.Token)
	r.Rollouts.Runner = redactURL(r.Rollouts.Runner)
	r.Tracing.Endpoint = redactURL(r.Tracing.Endpoint)
	for k := range r.Tracing.Headers {
		r.Tracing.Headers[k] = mask // a backend's API key, most likely
	}
	r.Learn.redact()
	for _, e := range r.Experiments {
		if e.Learn != nil {
			e.Learn.redact()
		}
	}
	r.Cache.RedisURL = redactURL(r.Cache.RedisURL)
	r.Episodes.RedisURL = redactURL(r.Episodes.RedisURL)
	for i, sink := range r.Replay.Sinks {
		r.Replay.Sinks[i] = redactURL(sink)
	}
	return r
}

func (l *Learn) redact() {
	l.APIKey = maskSecret(l.APIKey)
	l.BaseURL = redactURL(l.BaseURL)
	l.Store = redactURL(l.Store)
	l.From = redactURL(l.From)
}

func (u *Upstream) redact() {
	u.APIKey = maskSecret(u.APIKey)
	u.BaseURL = redactURL(u.BaseURL)
	u.Endpoint = redactURL(u.Endpoint)
}

// maskSecret masks a set secret and keeps "" visible, since "" means "not set".
func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return mask
}

// redactURL masks the passwords in a URL: the user info's, and secret-looking query
// parameters (a Sentinel URL's password= for the master). A string that does not
// parse as a URL is masked whole if it could hold credentials.
func redactURL(raw string) string { return redisx.Redact(raw) }

// clone returns a deep copy of c.
func (c *Config) clone() *Config {
	out := *c
	if c.Upstreams != nil {
		out.Upstreams = make(Upstreams, len(c.Upstreams))
		for name, u := range c.Upstreams {
			b := *u
			out.Upstreams[name] = &b
		}
	}
	out.Task = cloneTask(c.Task)
	if c.Augmenters != nil {
		out.Augmenters = make(map[string]Augmenter, len(c.Augmenters))
		for name, a := range c.Augmenters {
			a.ExtraBody = cloneMap(a.ExtraBody)
			out.Augmenters[name] = a
		}
	}
	out.Experiment = c.Experiment.clone()
	if c.Experiments != nil {
		out.Experiments = make([]Experiment, len(c.Experiments))
		for i, e := range c.Experiments {
			out.Experiments[i] = e.clone()
		}
	}
	out.Replay.Sinks = slices.Clone(c.Replay.Sinks)
	out.Tracing.Headers = maps.Clone(c.Tracing.Headers)
	return &out
}

// clone deep-copies e's arms, match, task rules and learn.
func (e Experiment) clone() Experiment {
	out := e
	out.Arms = slices.Clone(e.Arms)
	for i, arm := range out.Arms {
		if arm.Placement != nil {
			pl := *arm.Placement
			out.Arms[i].Placement = &pl
		}
	}
	m := &out.Match
	m.Agents, m.KeyFingerprints, m.Protocols = slices.Clone(m.Agents), slices.Clone(m.KeyFingerprints), slices.Clone(m.Protocols)
	m.Paths, m.Models = slices.Clone(m.Paths), slices.Clone(m.Models)
	if e.Task != nil {
		t := cloneTask(*e.Task)
		out.Task = &t
	}
	if e.Learn != nil {
		l := *e.Learn
		out.Learn = &l
	}
	return out
}

func cloneTask(t Task) Task {
	t.Rules = slices.Clone(t.Rules)
	for i := range t.Rules {
		r := &t.Rules[i]
		r.Skip, r.Strip = slices.Clone(r.Skip), slices.Clone(r.Strip)
		if r.Envelopes != nil {
			e := *r.Envelopes
			r.Envelopes = &e
		}
	}
	return t
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

// cloneValue deep-copies the maps and lists a YAML decode produces.
func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneMap(v)
	case map[any]any:
		out := make(map[any]any, len(v))
		for k, e := range v {
			out[k] = cloneValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}
