package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/camproxy/camproxy/internal/suggest"
	"github.com/camproxy/camproxy/protocol/registry"
)

// checkShape walks the document against Config's yaml tags and reports every
// unknown key, duplicate key and value of the wrong type, each as a
// *FieldError naming its dotted key. Augmenters' extra_body is free-form, a key
// of another augmenter type is reported, and an augmenters entry whose type is
// not supported is left to Validate.
func checkShape(root *yaml.Node) []error {
	var s shape
	s.walk(root, reflect.TypeFor[Config](), "")
	return s.errs
}

type shape struct{ errs []error }

// add reports a problem with key at node n's position in the file.
func (s *shape) add(n *yaml.Node, key, format string, args ...any) {
	s.errs = append(s.errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...), Line: n.Line, Column: n.Column})
}

func (s *shape) walk(n *yaml.Node, t reflect.Type, key string) {
	n = resolveAlias(n)
	if isNull(n) {
		return // null keeps the default (or empties a list)
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		s.leaf(n, t, key)
	case t == reflect.TypeFor[Upstreams]():
		s.upstreams(n, key)
	case t.Kind() == reflect.Pointer:
		s.walk(n, t.Elem(), key)
	case t.Kind() == reflect.Struct:
		s.object(n, t, key)
	case t.Kind() == reflect.Slice:
		s.list(n, t, key)
	case t.Kind() == reflect.Map && t.Elem().Kind() != reflect.Interface:
		s.entries(n, key, func(_ *yaml.Node, k string, v *yaml.Node) { s.walk(v, t.Elem(), joinKey(key, k)) })
	default:
		s.leaf(n, t, key) // scalars, and free-form maps such as extra_body
	}
}

// object checks a mapping against the yaml tags of struct type t.
func (s *shape) object(n *yaml.Node, t reflect.Type, key string) {
	var typ string // an augmenters entry's type
	if t == reflect.TypeFor[Augmenter]() {
		typ = augmenterType(n)
		switch typ {
		case "", AugmenterCAM, AugmenterRAG, AugmenterPlaybook:
		default:
			return // an unknown type: Validate reports it, its keys mean nothing yet
		}
	}
	fields := yamlFields(t)
	s.entries(n, key, func(kn *yaml.Node, k string, v *yaml.Node) {
		ft, ok := fields[k]
		if !ok {
			msg := "unknown key"
			if near := suggest.Closest(k, knownKeys(fields, typ)); near != "" {
				msg += "; did you mean " + joinKey(key, near) + "?"
			}
			s.add(kn, joinKey(key, k), "%s", msg)
			return
		}
		if only := augmenterOnly[k]; typ != "" && only != "" && only != typ {
			s.add(kn, joinKey(key, k), "applies to type %s only, not %s", only, typ)
			return
		}
		s.walk(v, ft, joinKey(key, k))
	})
}

// upstreams checks each block against its provider's keys (registry.Provider.Keys).
func (s *shape) upstreams(n *yaml.Node, key string) {
	fields := yamlFields(reflect.TypeFor[Upstream]())
	s.entries(n, key, func(kn *yaml.Node, name string, v *yaml.Node) {
		prov := registry.ProviderNamed(name)
		if prov == nil {
			msg := "unknown provider; the providers are " + strings.Join(registry.ProviderNames(), ", ")
			if near := suggest.Closest(name, registry.ProviderNames()); near != "" {
				msg = "unknown provider; did you mean " + joinKey(key, near) + "?"
			}
			s.add(kn, joinKey(key, name), "%s", msg)
			return
		}
		block := joinKey(key, name)
		v = resolveAlias(v)
		if isNull(v) {
			return
		}
		s.entries(v, block, func(kn *yaml.Node, k string, v *yaml.Node) {
			if !slices.Contains(prov.Keys, k) {
				msg := "unknown key; the " + name + " upstream takes " + strings.Join(prov.Keys, ", ")
				if near := suggest.Closest(k, prov.Keys); near != "" {
					msg = "unknown key; did you mean " + joinKey(block, near) + "?"
				}
				s.add(kn, joinKey(block, k), "%s", msg)
				return
			}
			s.walk(v, fields[k], joinKey(block, k))
		})
	})
}

func (s *shape) list(n *yaml.Node, t reflect.Type, key string) {
	if n.Kind != yaml.SequenceNode {
		s.add(n, key, "expected a list, got %s", describeNode(n))
		return
	}
	for i, e := range n.Content {
		s.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", key, i))
	}
}

// entries calls fn for each key of mapping n, following merge keys (<<) and
// reporting duplicate and non-string keys.
func (s *shape) entries(n *yaml.Node, key string, fn func(kn *yaml.Node, k string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		s.add(n, key, "expected a mapping, got %s", describeNode(n))
		return
	}
	firstLine := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), n.Content[i+1]
		switch {
		case isMergeKey(k):
			for _, m := range mergeSources(v) {
				s.entries(m, key, fn)
			}
		case k.Kind != yaml.ScalarNode:
			s.add(k, key, "keys must be strings, got %s", describeNode(k))
		case firstLine[k.Value] != 0:
			s.add(k, joinKey(key, k.Value), "duplicate key; first set on line %d", firstLine[k.Value])
		default:
			firstLine[k.Value] = max(k.Line, 1)
			fn(k, k.Value, v)
		}
	}
}

// leaf checks that n decodes into a value of type t.
func (s *shape) leaf(n *yaml.Node, t reflect.Type, key string) {
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		s.add(n, key, "expected %s, got %s", describeType(t), describeNode(n))
	}
}

// yamlFields maps each yaml key of struct type t to its field type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	return fields
}

// augmenterOnly maps each augmenters key that belongs to one type (its
// augmenter struct tag) to that type.
var augmenterOnly = func() map[string]string {
	m := map[string]string{}
	for f := range reflect.TypeFor[Augmenter]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if only := f.Tag.Get("augmenter"); only != "" {
			m[name] = only
		}
	}
	return m
}()

// augmenterType is the type that mapping n sets, or "".
func augmenterType(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), resolveAlias(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Value == "type" && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}

func mergeSources(v *yaml.Node) []*yaml.Node {
	v = resolveAlias(v)
	if v.Kind != yaml.SequenceNode {
		return []*yaml.Node{v}
	}
	out := make([]*yaml.Node, 0, len(v.Content))
	for _, e := range v.Content {
		out = append(out, resolveAlias(e))
	}
	return out
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isMergeKey(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && n.ShortTag() == "!!merge"
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func describeType(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return `a duration such as "30s"`
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := []rune(n.Value)
	if len(v) > 40 {
		v = append(v[:37], []rune("...")...)
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(string(v))
	}
	return string(v)
}
