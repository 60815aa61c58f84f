package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// Experiment is one experiment of a runtime: the calls it takes, the task rules its
// calls are read by, where its arms' context goes, its arms and their augmenters.
type Experiment struct {
	Name         string
	Match        Match
	TaskRules    []protocol.TaskRule
	Placement    Placement // default placement
	ArmPlacement map[string]Placement
	Policy       *policies.Policy
	Augmenters   map[string]ContextSource
}

// normalise is rt with its experiments in Experiments: rt itself when it lists them;
// when a caller set only the one-experiment fields, a copy whose one experiment is
// made of them and takes every call.
func (rt *Runtime) normalise() *Runtime {
	if rt == nil || len(rt.Experiments) > 0 {
		return rt
	}
	n := *rt
	var name string
	if rt.Policy != nil {
		name = rt.Policy.Name()
	}
	n.Experiments = []*Experiment{{Name: name, TaskRules: rt.TaskRules, Placement: rt.Placement,
		ArmPlacement: rt.ArmPlacement, Policy: rt.Policy, Augmenters: rt.Augmenters}}
	return &n
}

// experiment is the runtime's experiment named name, or nil.
func (rt *Runtime) experiment(name string) *Experiment {
	for _, x := range rt.Experiments {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// Match says which calls an experiment takes: every condition given must hold; with
// none it takes every call. NewMatch builds it from the config's match keys.
type Match struct {
	agents       []string // X-CAM-Agent values
	fingerprints []string // lower-case hex prefixes of KeyFingerprint
	protocols    []string // registry explain names
	paths        []string // globs on the decoded path
	models       []string // lower-case globs on the lower-cased model
	task         *regexp.Regexp
}

// NewMatch compiles an experiment's match keys (config.Match): the agents
// (X-CAM-Agent), hex prefixes of key fingerprints, protocols (their task explain
// names), globs on the path and on the model (case-insensitive), a regexp on the task.
func NewMatch(agents, keyFingerprints, protocols, paths, models []string, task string) (Match, error) {
	m := Match{agents: agents, protocols: protocols, paths: paths}
	for _, f := range keyFingerprints {
		m.fingerprints = append(m.fingerprints, strings.ToLower(f))
	}
	for _, g := range models {
		m.models = append(m.models, strings.ToLower(g))
	}
	for _, g := range slices.Concat(paths, m.models) {
		if _, err := path.Match(g, ""); err != nil {
			return Match{}, fmt.Errorf("%q is not a glob: %w", g, err)
		}
	}
	if task != "" {
		re, err := regexp.Compile(task)
		if err != nil {
			return Match{}, fmt.Errorf("task: %w", err)
		}
		m.task = re
	}
	return m, nil
}

// Empty says whether m takes every call.
func (m *Match) Empty() bool {
	return len(m.agents)+len(m.fingerprints)+len(m.protocols)+len(m.paths)+len(m.models) == 0 && m.task == nil
}

// head says whether the conditions read before the body hold: the agent header, the
// protocol, the path, the credential's fingerprint (computed once per call, and only
// when an experiment asks for it).
func (m *Match) head(c registry.Call, explain string, key *keyPrint) bool {
	if len(m.agents) > 0 && !containsBytes(m.agents, c.Header(hdrAgent)) {
		return false
	}
	if len(m.protocols) > 0 && !slices.Contains(m.protocols, explain) {
		return false
	}
	if len(m.paths) > 0 && !globAny(m.paths, string(c.Path())) {
		return false
	}
	if len(m.fingerprints) > 0 {
		fp := key.of(c)
		if fp == nil || !slices.ContainsFunc(m.fingerprints, func(p string) bool { return bytes.HasPrefix(fp, []byte(p)) }) {
			return false
		}
	}
	return true
}

// body says whether the conditions read from the body hold: the model and the task.
func (m *Match) body(v *protocol.View) bool {
	if len(m.models) > 0 && !globAny(m.models, strings.ToLower(v.Model)) {
		return false
	}
	return m.task == nil || m.task.MatchString(v.Task)
}

func containsBytes(list []string, b []byte) bool {
	return slices.ContainsFunc(list, func(s string) bool { return s == string(b) })
}

func globAny(globs []string, s string) bool {
	return slices.ContainsFunc(globs, func(g string) bool { ok, _ := path.Match(g, s); return ok })
}

// KeyFingerprint is the lower-case hex sha256 of a client credential: what
// match.key_fingerprints prefixes and `camproxy key fingerprint` prints. Only a
// prefix of it is ever configured; neither the key nor the whole fingerprint is logged.
func KeyFingerprint(key []byte) [sha256.Size * 2]byte {
	sum := sha256.Sum256(key)
	var out [sha256.Size * 2]byte
	hex.Encode(out[:], sum[:])
	return out
}

// ClientKey is a key as a person hands it over (a file, an argument): surrounding
// whitespace and a "Bearer " scheme dropped, it is the credential KeyFingerprint
// takes, as Credential reads it off a call.
func ClientKey(raw []byte) []byte {
	key, _ := TrimBearer(bytes.TrimSpace(raw))
	return bytes.TrimSpace(key)
}

// keyPrint is a call's credential fingerprint, computed at the first experiment that
// matches on one.
type keyPrint struct {
	done bool
	ok   bool
	fp   [sha256.Size * 2]byte
}

// of is the fingerprint of the call's credential, nil when it sends none.
func (k *keyPrint) of(c registry.Call) []byte {
	if !k.done {
		k.done = true
		if cred := Credential(c); len(cred) > 0 {
			k.fp, k.ok = KeyFingerprint(cred), true
		}
	}
	if !k.ok {
		return nil
	}
	return k.fp[:]
}

// Credential is the client's credential as it sent it, minus a Bearer scheme: the
// Authorization bearer token (for AWS SigV4, the access key id of its Credential=
// scope), else the x-api-key, api-key or x-goog-api-key header, else the ?key= query
// parameter. nil when the call carries none.
func Credential(c registry.Call) []byte {
	if a := c.Header("Authorization"); len(a) > 0 {
		if token, ok := TrimBearer(a); ok {
			return token
		}
		switch {
		case bytes.HasPrefix(a, []byte("AWS4-")):
			_, scope, ok := bytes.Cut(a, []byte("Credential="))
			if !ok {
				return nil
			}
			akid, _, _ := bytes.Cut(scope, []byte("/"))
			return akid
		default:
			return a
		}
	}
	for _, h := range [...]string{"X-Api-Key", "Api-Key", "X-Goog-Api-Key"} {
		if v := c.Header(h); len(v) > 0 {
			return v
		}
	}
	return c.Query("key")
}

// TrimBearer is a credential without its "Bearer " scheme (in any case), and whether
// it had one.
func TrimBearer(a []byte) ([]byte, bool) {
	const bearer = "Bearer "
	if len(a) >= len(bearer) && strings.EqualFold(string(a[:len(bearer)]), bearer) {
		return a[len(bearer):], true
	}
	return a, false
}

// ErrNoExperiment is a call no experiment takes, in a runtime with no default: it is
// relayed as it came, unrecorded, without X-CAM-* headers.
var ErrNoExperiment = errors.New("no experiment takes this call")

// UnknownExperimentError is an X-CAM-Experiment naming no experiment.
type UnknownExperimentError struct {
	Name  string
	Names []string // the experiments, in match order
}

func (e *UnknownExperimentError) Error() string {
	n := e.Name
	if len(n) > 64 {
		n = n[:64] + "..."
	}
	return fmt.Sprintf("%s: %q is not an experiment; the experiments are %s", hdrExperiment, n, strings.Join(e.Names, ", "))
}

// Choice is the experiment a call belongs to and the call's body read by its task rules.
type Choice struct {
	Experiment *Experiment
	Request    protocol.Request
	// Ignored: X-CAM-Experiment named an experiment whose allow_override is off.
	Ignored bool
}

// Choose is the one place a call is matched to its experiment, among xs in match
// order; the proxy and `camproxy task explain` both ask it. X-CAM-Experiment names
// the experiment when that experiment allows overrides. Otherwise the first
// experiment whose match holds takes the call: the conditions on the headers, path
// and protocol first, then the body, read by p with that experiment's task rules (once
// per set of rules: candidates that share theirs share the reading), for the model and
// the task.
// A runtime's default is its last experiment, whose match is empty. Errors: p's parse
// errors, *UnknownExperimentError, ErrNoExperiment.
func Choose(xs []*Experiment, p *registry.Protocol, c registry.Call, body []byte) (Choice, error) {
	var ch Choice
	if name := c.Header(hdrExperiment); len(name) > 0 {
		i := slices.IndexFunc(xs, func(x *Experiment) bool { return x.Name == string(name) })
		if i < 0 {
			names := make([]string, len(xs))
			for j, x := range xs {
				names[j] = x.Name
			}
			return ch, &UnknownExperimentError{Name: string(name), Names: names}
		}
		if x := xs[i]; x.Policy != nil && x.Policy.AllowOverride() {
			r, err := p.Parse(c, body, x.TaskRules)
			if err != nil {
				return ch, err
			}
			ch.Experiment, ch.Request = x, r
			return ch, nil
		}
		ch.Ignored = true
	}
	var (
		key  keyPrint
		read reads
	)
	for _, x := range xs {
		if !x.Match.head(c, p.Explain, &key) {
			continue
		}
		r := read.of(x.TaskRules)
		if r == nil {
			var err error
			if r, err = p.Parse(c, body, x.TaskRules); err != nil {
				return ch, err
			}
			read.add(x.TaskRules, r)
		}
		if x.Match.body(r.Parsed()) {
			ch.Experiment, ch.Request = x, r
			return ch, nil
		}
	}
	return ch, ErrNoExperiment
}

// reads are the readings of one body by the candidates' task rules so far: a gateway's
// experiments have few sets of rules (most share the top-level ones), and each set
// reads the body once. Past len(reads) sets, a body is read again.
type reads struct {
	n     int
	rules [4][]protocol.TaskRule
	r     [4]protocol.Request
}

func (rs *reads) of(rules []protocol.TaskRule) protocol.Request {
	for i := range rs.n {
		if sameRules(rs.rules[i], rules) {
			return rs.r[i]
		}
	}
	return nil
}

func (rs *reads) add(rules []protocol.TaskRule, r protocol.Request) {
	if rs.n < len(rs.r) {
		rs.rules[rs.n], rs.r[rs.n] = rules, r
		rs.n++
	}
}

// sameRules says whether a and b are the same compiled rules (one slice): the body
// read by a is the body read by b.
func sameRules(a, b []protocol.TaskRule) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
