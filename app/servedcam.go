package app

import (
	"fmt"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/trainer"
)

// ServedCAM is a cam augmenter as camproxy serves it, the one source of what the
// training stages write: its prompt (CAM renders it) and the chat template
// arguments it sends, so the training files hold exactly what camproxy sends the
// CAM, rendered the way the CAM's server renders it.
type ServedCAM struct {
	CAM    *augment.CAM
	Name   string
	Kwargs trainer.ChatTemplateKwargs // extra_body.chat_template_kwargs
}

// ServedCAMOf is cfg's cam augmenter name, or its only one when name is "", or the
// built-in default prompt (as "default") when it has none. Every error names what
// to give instead (--cam, the augmenters' names).
func ServedCAMOf(cfg *config.Config, name string) (ServedCAM, error) {
	var cams []string
	for n, a := range cfg.Augmenters {
		if a.Type == config.AugmenterCAM {
			cams = append(cams, n)
		}
	}
	slices.Sort(cams)
	var ac config.Augmenter
	switch {
	case name != "":
		a, ok := cfg.Augmenters[name]
		if !ok || a.Type != config.AugmenterCAM {
			return ServedCAM{}, fmt.Errorf("--cam %q: the config has no cam augmenter of that name (cam augmenters: %s)", name, listOrNone(cams))
		}
		ac = a
	case len(cams) == 1:
		name, ac = cams[0], cfg.Augmenters[cams[0]]
	case len(cams) == 0:
		name, ac = "default", config.DefaultAugmenter() // the prompt an augmenter gets when it sets none
		ac.Type = config.AugmenterCAM
	default:
		return ServedCAM{}, fmt.Errorf("the config has several cam augmenters (%s): choose one with --cam", strings.Join(cams, ", "))
	}
	c, err := augment.NewCAM(CAMOptions(name, ac), nil)
	if err != nil {
		return ServedCAM{}, err
	}
	sc := ServedCAM{CAM: c, Name: name}
	switch kw := ac.ExtraBody["chat_template_kwargs"].(type) {
	case nil:
	case map[string]any:
		sc.Kwargs = kw
	default:
		return ServedCAM{}, fmt.Errorf("augmenters.%s.extra_body.chat_template_kwargs is a %T, want a mapping", name, kw)
	}
	return sc, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
