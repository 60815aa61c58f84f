package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path and parses it with Parse. Errors name the file.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, getenv)
	if err != nil {
		return nil, &fileError{path: path, err: err}
	}
	return cfg, nil
}

// fileError is what is wrong with a config file: one problem on the line that names
// the file, several each on a line of their own below it.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string {
	var errs []error
	if j, ok := e.err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) < 2 {
		return "config " + e.path + ": " + e.err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problems:", e.path, len(errs))
	for _, err := range errs {
		b.WriteString("\n  " + strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	return b.String()
}

func (e *fileError) Unwrap() error { return e.err }

// Parse expands ${ENV} references in data (getenv nil means os.LookupEnv),
// decodes it over Default(), fills each augmenters entry from
// DefaultAugmenter(), and validates the result. Unknown keys, values of the
// wrong type and invalid values are all reported together, each as a
// *FieldError naming its dotted key.
func Parse(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	text, err := expandEnv(string(data), getenv)
	if err != nil {
		return nil, err
	}
	root, err := parseDocument([]byte(text))
	if err != nil {
		return nil, err
	}
	cfg := Default()
	var errs []error
	if root != nil {
		errs, err = decode(root, cfg)
		if err != nil {
			return nil, err
		}
	}
	errs = append(errs, cfg.validate()...)
	if root != nil {
		locate(root, errs) // the validation's problems, at the keys the file sets
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// parseDocument parses the single YAML document in data. It returns nil for a
// document that is empty, only comments, or null.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("invalid YAML: %w", syntaxError(data, err))
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid YAML: a config file holds exactly one document")
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil
	}
	return doc.Content[0], nil
}

// decode decodes root over cfg. It returns the problems it found in the
// document's shape (unknown keys, wrong types, duplicate keys) as field errors,
// and an error only for a document it cannot decode at all.
func decode(root *yaml.Node, cfg *Config) ([]error, error) {
	decodeErr := root.Decode(cfg)
	var typeErr *yaml.TypeError
	if decodeErr != nil && !errors.As(decodeErr, &typeErr) {
		return nil, fmt.Errorf("invalid YAML: %w", decodeErr)
	}
	cfg.Augmenters = decodeAugmenters(root) // replaces the default map
	cfg.Experiments = decodeExperiments(root)
	cfg.fillArmPlacements()

	errs := checkShape(root)
	if k := mappingKey(root, "experiments"); k != nil && len(cfg.Experiments) > 0 && mappingKey(root, "experiment") != nil {
		errs = append(errs, &FieldError{Key: "experiments", Msg: "give experiment (one) or experiments (a list), not both", Line: k.Line, Column: k.Column})
	}
	if typeErr != nil && len(errs) == 0 {
		// checkShape mirrors the decoder's type checks; this is a safety net.
		errs = append(errs, fmt.Errorf("invalid config: %w", typeErr))
	}
	return errs, nil
}

// mappingKey is the key node named name of mapping n, or nil.
func mappingKey(n *yaml.Node, name string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i]
		}
	}
	return nil
}

// decodeAugmenters decodes each augmenters entry over DefaultAugmenter().
// Errors are dropped here because checkShape reports each with its key; an
// entry keeps whatever part of it decoded.
func decodeAugmenters(root *yaml.Node) map[string]Augmenter {
	var raw struct {
		Augmenters map[string]yaml.Node `yaml:"augmenters"`
	}
	_ = root.Decode(&raw)
	out := make(map[string]Augmenter, len(raw.Augmenters))
	for name, n := range raw.Augmenters {
		a := DefaultAugmenter()
		_ = n.Decode(&a)
		out[name] = a
	}
	return out
}

// decodeExperiments decodes each experiments entry over DefaultExperiment(), and
// its learn over DefaultLearn(). Errors are dropped: checkShape reports each.
func decodeExperiments(root *yaml.Node) []Experiment {
	var raw struct {
		Experiments []yaml.Node `yaml:"experiments"`
	}
	_ = root.Decode(&raw)
	if raw.Experiments == nil {
		return nil
	}
	out := make([]Experiment, 0, len(raw.Experiments))
	for _, n := range raw.Experiments {
		e := DefaultExperiment()
		e.Name = ""
		_ = n.Decode(&e)
		var lr struct {
			Learn yaml.Node `yaml:"learn"`
		}
		if _ = n.Decode(&lr); lr.Learn.Kind != 0 && !isNull(&lr.Learn) {
			l := DefaultLearn()
			_ = lr.Learn.Decode(&l)
			e.Learn = &l
		}
		out = append(out, e)
	}
	return out
}

// fillArmPlacements completes each per-arm placement override with the
// top-level placement's values for the keys it omits.
func (c *Config) fillArmPlacements() {
	arms := c.Experiment.Arms
	for _, e := range c.Experiments {
		arms = append(slices.Clip(arms), e.Arms...)
	}
	for _, arm := range arms {
		if arm.Placement == nil {
			continue
		}
		if arm.Placement.Mode == "" {
			arm.Placement.Mode = c.Placement.Mode
		}
		if arm.Placement.Template == "" {
			arm.Placement.Template = c.Placement.Template
		}
	}
}
