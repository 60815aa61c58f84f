// Package policies owns experiments: the arms traffic is split between and the
// deterministic, sticky assignment of an episode (or a task) to one of them.
package policies

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Arm is one branch of an experiment.
type Arm struct {
	Name      string
	Weight    float64
	Augmenter string // "none" or an augmenter name
}

// Sticky says what an assignment hashes: the episode, or the task (all runs of a task on one arm).
type Sticky string

const (
	StickyEpisode Sticky = "episode"
	StickyTask    Sticky = "task"
)

// Policy assigns episodes to arms. Assignment is a hash over the current weights: every
// replica with the same weights agrees on every assignment without talking. Weights
// are the configured ones, or those an Adaptive allocator last set.
type Policy struct {
	name          string
	sticky        Sticky
	allowOverride bool
	arms          []Arm
	cum           atomic.Pointer[[]float64] // cumulative weights normalised to 1
}

// New builds a policy; arms must have non-negative weights with a positive sum.
func New(name string, sticky Sticky, allowOverride bool, arms []Arm) (*Policy, error) {
	if len(arms) == 0 {
		return nil, fmt.Errorf("experiment %q has no arms", name)
	}
	var sum float64
	for _, a := range arms {
		if a.Weight < 0 {
			return nil, fmt.Errorf("arm %q: negative weight", a.Name)
		}
		sum += a.Weight
	}
	if sum <= 0 {
		return nil, fmt.Errorf("experiment %q: arm weights sum to 0", name)
	}
	p := &Policy{name: name, sticky: sticky, allowOverride: allowOverride, arms: append([]Arm(nil), arms...)}
	w := make([]float64, len(arms))
	for i, a := range arms {
		w[i] = a.Weight
	}
	p.SetWeights(w)
	return p, nil
}

// Arms returns the experiment's arms in config order.
func (p *Policy) Arms() []Arm { return p.arms }

// SetWeights replaces the traffic weights (one per arm, in config order, summing to
// more than 0). Live episodes keep their arm: it is stored on the episode.
func (p *Policy) SetWeights(w []float64) {
	var sum float64
	for _, x := range w {
		sum += max(x, 0)
	}
	cum := make([]float64, len(w))
	var acc float64
	for i, x := range w {
		acc += max(x, 0) / sum
		cum[i] = acc
	}
	p.cum.Store(&cum)
}

// Weights returns the current traffic shares, one per arm.
func (p *Policy) Weights() []float64 {
	cum := *p.cum.Load()
	out := make([]float64, len(cum))
	prev := 0.0
	for i, c := range cum {
		out[i], prev = c-prev, c
	}
	return out
}

// Name is the experiment's name.
func (p *Policy) Name() string { return p.name }

// Arm returns the arm called name.
func (p *Policy) Arm(name string) (Arm, bool) {
	for _, a := range p.arms {
		if a.Name == name {
			return a, true
		}
	}
	return Arm{}, false
}

// AllowOverride reports whether the experiment honours X-CAM-Arm: with it off the
// header is ignored (the proxy says so in X-CAM-Arm-Override: ignored).
func (p *Policy) AllowOverride() bool { return p.allowOverride }

// UnknownArmError is an override that names no arm of an experiment that allows
// overrides: a typo there would silently put the episode on a hashed arm.
type UnknownArmError struct {
	Experiment, Override string
	Arms                 []string // the experiment's arms, in config order
}

func (e *UnknownArmError) Error() string {
	o := e.Override
	if len(o) > 64 {
		o = o[:64] + "..."
	}
	return fmt.Sprintf("%q is not an arm of experiment %q; its arms: %s", o, e.Experiment, strings.Join(e.Arms, ", "))
}

// Assign picks the arm of a new episode. override (the X-CAM-Arm header) wins when
// the experiment allows overrides; an override naming no arm is then an
// *UnknownArmError. Without overrides it is ignored.
func (p *Policy) Assign(episodeID, taskID, override string) (Arm, error) {
	if override != "" && p.allowOverride {
		a, ok := p.Arm(override)
		if !ok {
			names := make([]string, len(p.arms))
			for i, a := range p.arms {
				names[i] = a.Name
			}
			return Arm{}, &UnknownArmError{Experiment: p.name, Override: override, Arms: names}
		}
		return a, nil
	}
	key := episodeID
	if p.sticky == StickyTask {
		key = taskID
	}
	return p.arms[p.index(key)], nil
}

func (p *Policy) index(key string) int {
	d := xxhash.New()
	_, _ = d.WriteString(p.name)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(key)
	// 53 high bits → a uniform float in [0,1).
	u := float64(d.Sum64()>>11) / (1 << 53)
	cum := *p.cum.Load()
	for i, c := range cum {
		if u < c {
			return i
		}
	}
	// Rounding left u above the last sum: the last arm with traffic.
	for i := len(cum) - 1; i > 0; i-- {
		if cum[i] > cum[i-1] {
			return i
		}
	}
	return 0
}
