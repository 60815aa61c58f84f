package config

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/camproxy/camproxy/internal/redisx"
)

// EffectiveYAML renders c as a config file camproxy loads back to the same config:
// Redacted's masks, then a second pass over every value that masks what still looks
// like a secret (keys named like one, passwords and secret query parameters in
// URLs), keys that do not apply to an augmenter's type left out, durations short.
// It is what `camproxy config check` prints.
func (c *Config) EffectiveYAML() ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(c.Redacted()); err != nil {
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

// MissingFiles names the files the config points at that are not there: the config
// is valid, but serve started in this working directory would stop at them.
func (c *Config) MissingFiles() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(c.Augmenters)) {
		a := c.Augmenters[name]
		key, file := "", ""
		switch a.Type {
		case AugmenterRAG:
			key, file = "guidance_file", a.GuidanceFile
		case AugmenterPlaybook:
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
		empty := key == "extra_body" && v.Kind == yaml.MappingNode && len(v.Content) == 0
		return !augmenterKeyApplies(mappingValue(parent, "type"), key) || empty
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

// augmenterKeyApplies is whether key of an augmenters entry applies to an augmenter
// of type typ (its augmenter struct tag, as the shape check reads it); every key
// applies to a type camproxy does not know.
func augmenterKeyApplies(typ, key string) bool {
	switch typ {
	case AugmenterCAM, AugmenterRAG, AugmenterPlaybook:
		only := augmenterOnly[key]
		return only == "" || only == typ
	}
	return true
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

// secretKey matches keys whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(^|_)(api_?key|token|password|passwd|secret|credentials?|auth(orization)?)$`)

// maskURL masks a password and secret query parameters in a value that is a URL
// (redisx.Redact, the one redactor); any other value is returned as it is. A text
// that mentions a URL (a prompt) is no URL.
func maskURL(s string) string {
	if !strings.Contains(s, "://") || strings.ContainsAny(s, " \t\n") {
		return s
	}
	return redisx.Redact(s)
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
