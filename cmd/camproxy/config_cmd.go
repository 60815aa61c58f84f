package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/camproxy/camproxy/config"
)

func (c *cli) configCmd() *cobra.Command {
	var quiet bool
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a config as serve would and print the effective config",
		Long: `Validate FILE (default $CAMPROXY_CONFIG, else the built-in defaults) as serve
would, and print the effective config: every key with its value after ${ENV}
expansion and defaults, secrets masked. Exit status 2 names every bad key, with
its line and column, and the key probably meant.`,
		Example: `  camproxy config check camproxy.yaml
  CAMPROXY_CONFIG=camproxy.yaml camproxy config check --quiet`,
		ValidArgsFunction: completeFiles,
		Args: c.checks(func(p *problems, args []string) {
			if len(args) > 1 {
				p.add("want at most one FILE, got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			return c.configCheck(path, quiet)
		},
	}
	check.Flags().BoolVar(&quiet, "quiet", false, "print nothing but problems and warnings")
	return c.group("config", "Check a config file", "  camproxy config check camproxy.yaml", check)
}

// configCheck is `camproxy config check`.
func (c *cli) configCheck(path string, quiet bool) error {
	if path == "" {
		path, _ = c.getenv("CAMPROXY_CONFIG")
	}
	name := path
	if name == "" {
		name = "the built-in defaults"
	}
	cfg, err := loadConfig(path, c.getenv)
	if err != nil {
		return err
	}
	for _, w := range fileWarnings(cfg) {
		fmt.Fprintln(c.stderr, "camproxy: warning:", w)
	}
	if quiet {
		return nil
	}
	out, err := effectiveYAML(cfg)
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	fmt.Fprintf(c.stdout, "# %s: valid. The effective config: defaults filled in, ${ENV} expanded, secrets masked.\n", name)
	_, err = c.stdout.Write(out)
	return err
}

// fileWarnings names the files the config points at that are not there: the config
// is valid, but serve started here would stop at them.
func fileWarnings(cfg *config.Config) []string {
	var out []string
	for _, name := range sortedKeys(cfg.Augmenters) {
		a := cfg.Augmenters[name]
		key, file := "", ""
		switch a.Type {
		case config.AugmenterRAG:
			key, file = "guidance_file", a.GuidanceFile
		case config.AugmenterPlaybook:
			key, file = "file", a.File
		}
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			out = append(out, fmt.Sprintf("augmenters.%s.%s: %v (relative paths are from the working directory; serve here would not start)", name, key, err))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// effectiveYAML renders cfg as a config file camproxy loads back to the same config:
// Redacted's masks, then a second pass over every value that masks what still looks
// like a secret (keys named like one, passwords and secret query parameters in
// URLs), keys that do not apply to an augmenter's type left out, durations short.
func effectiveYAML(cfg *config.Config) ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(cfg.Redacted()); err != nil {
		return nil, err
	}
	tidy(&root, "")
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// augmenterKeys maps each augmenter type to the keys of config.Augmenter that apply
// to it (from the augmenter struct tags, as the config's own shape check does).
var augmenterKeys = func() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	t := reflect.TypeFor[config.Augmenter]()
	for _, typ := range []string{config.AugmenterCAM, config.AugmenterRAG, config.AugmenterPlaybook} {
		keys := map[string]bool{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if only := f.Tag.Get("augmenter"); only == "" || only == typ {
				keys[name] = true
			}
		}
		out[typ] = keys
	}
	return out
}()

// tidy walks the encoded config at the dotted key path.
func tidy(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			tidy(c, path+"[]")
		}
	case yaml.MappingNode:
		var keep []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := strings.TrimPrefix(path+"."+k.Value, ".")
			if dropKey(path, k.Value, v, n) {
				continue
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value != "" && secretKey.MatchString(k.Value) {
				v.Value = mask
			}
			if strings.HasPrefix(path, "augmenters.") && strings.Count(path, ".") == 1 {
				key = "augmenters.*." + k.Value
			}
			tidy(v, key)
			keep = append(keep, k, v)
		}
		n.Content = keep
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			n.Value = maskURL(shortDuration(n.Value))
			if strings.Contains(n.Value, "${") || strings.Contains(n.Value, "$$") {
				n.Value = strings.ReplaceAll(n.Value, "$", "$$") // expanded already: read back literally
			}
			if strings.Contains(n.Value, "\n") {
				// A long text (a prompt) reads best as a block; a short one (a
				// template) as the quoted string people write.
				n.Style = yaml.DoubleQuotedStyle
				if len(n.Value) > 120 && strings.TrimLeft(n.Value, " \n") == n.Value {
					n.Style = yaml.LiteralStyle
				}
			}
		}
	}
}

// dropKey leaves out what does not belong in a loadable file or says nothing: keys
// that do not apply to an augmenter's type, an empty extra_body, an arm placement
// that is not set, an unset task rule field.
func dropKey(path, key string, v, parent *yaml.Node) bool {
	switch {
	case strings.HasPrefix(path, "augmenters.") && strings.Count(path, ".") == 1:
		keys := augmenterKeys[mappingValue(parent, "type")]
		empty := key == "extra_body" && v.Kind == yaml.MappingNode && len(v.Content) == 0
		return keys != nil && !keys[key] || empty
	case (path == "experiment.arms[]" || path == "experiments[].arms[]") && key == "placement":
		return v.Tag == "!!null"
	case path == "task.rules[]":
		return v.Value == "" || v.Value == "false"
	case path == "experiments[].task.rules[]":
		return v.Kind == yaml.ScalarNode && (v.Value == "" || v.Value == "false") || v.Kind == yaml.SequenceNode && len(v.Content) == 0
	case path == "" && key == "experiment":
		return mappingNode(parent, "experiments") != nil // the list form replaces it
	}
	return false
}

func mappingNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func mappingValue(n *yaml.Node, key string) string {
	if v := mappingNode(n, key); v != nil {
		return v.Value
	}
	return ""
}

// mask is what a masked secret reads (config.Redacted's).
const mask = "****"

// secretKey matches keys whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(^|_)(api_?key|token|password|passwd|secret|credentials?|auth(orization)?)$`)

// secretParam matches URL query parameters that carry secrets.
var secretParam = regexp.MustCompile(`(?i)(pass(word)?|token|secret|key|signature|credential|auth)`)

// maskURL masks a password and secret query parameters in a URL; anything else is
// returned as it is.
func maskURL(s string) string {
	if !strings.Contains(s, "://") || strings.ContainsAny(s, " \t\n") { // a prompt that mentions a URL is no URL
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return mask
		}
		return s
	}
	changed, query := false, false
	if pw, ok := u.User.Password(); ok {
		// Re-set even when already masked: u.String() would escape a bare "****".
		u.User = url.UserPassword(u.User.Username(), "MASKED")
		changed = changed || pw != mask
	}
	q := u.Query()
	for k, vs := range q {
		// On a Redis URL, ?key= is learn.store's key prefix (storage.OpenStore), not a
		// secret: masking it would make the printed config use the prefix "****".
		if secretParam.MatchString(k) && !(k == "key" && (u.Scheme == "redis" || u.Scheme == "rediss")) {
			for i := range vs {
				if vs[i] != mask {
					vs[i], changed, query = "MASKED", true, true
				}
			}
		}
	}
	if !changed {
		return s
	}
	if query { // else the query stays as written: the printed config loads back to it
		u.RawQuery = q.Encode()
	}
	return strings.ReplaceAll(u.String(), "MASKED", mask)
}

// durationShape is what a time.Duration's String looks like.
var durationShape = regexp.MustCompile(`^(\d+h)?(\d+m)?(\d+(\.\d+)?[mµn]?s)?$`)

// shortDuration writes a Go duration without its zero tails: 24h0m0s → 24h.
func shortDuration(s string) string {
	if !durationShape.MatchString(s) {
		return s
	}
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
