package online

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/playbook/storage"
)

// stateName is the learner's state in the store.
const stateName = "learn-state.json"

// Learner arm statuses.
const (
	armCandidate = "candidate"
	armChampion  = "champion"
	armStopped   = "stopped"
	armRetired   = "retired" // a champion that was replaced
)

// state is what every replica serves and the lease holder changes.
type state struct {
	Experiment      string `json:"experiment"`
	Gen             int64  `json:"gen"` // bumped on every change: replicas rebuild when it moves
	Champion        string `json:"champion"`
	ChampionVersion int    `json:"champion_version"`
	// BaseVersion, when set, is the version the next step starts from instead of the
	// champion's: a step that changed only counts (the same context) is written but
	// not tried, and its counts carry on.
	BaseVersion int        `json:"base_version,omitempty"`
	Removed     []string   `json:"removed,omitempty"` // configured arms that left the experiment (replaced champions)
	Arms        []stateArm `json:"arms"`              // one per version, oldest first
	Steps       int        `json:"steps"`
	LastN       float64    `json:"last_n"` // the champion's rewarded episodes at the last step
	Cutoff      time.Time  `json:"cutoff"` // the champion's episodes rewarded after this feed the next step
	OptState    string     `json:"optimizer_state,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// stateArm is one version and the arm that serves it.
type stateArm struct {
	Arm       string    `json:"arm"`
	Version   int       `json:"version"`
	Parent    int       `json:"parent"`
	Iteration int       `json:"iteration"`
	Entries   int       `json:"entries"`
	Status    string    `json:"status"` // candidate | champion | stopped | retired
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ChangedAt time.Time `json:"changed_at"`
}

func (s *state) clone() *state {
	c := *s
	c.Removed = slices.Clone(s.Removed)
	c.Arms = slices.Clone(s.Arms)
	return &c
}

func (s *state) arm(name string) *stateArm {
	for i := range s.Arms {
		if s.Arms[i].Arm == name {
			return &s.Arms[i]
		}
	}
	return nil
}

// candidates are the arms under trial.
func (s *state) candidates() []*stateArm {
	var out []*stateArm
	for i := range s.Arms {
		if s.Arms[i].Status == armCandidate {
			out = append(out, &s.Arms[i])
		}
	}
	return out
}

// served are the learner's own arms the experiment runs: candidates and a learnt champion.
func (s *state) served() []stateArm {
	var out []stateArm
	for _, a := range s.Arms {
		if IsLearnArm(a.Arm) && (a.Status == armCandidate || a.Status == armChampion) {
			out = append(out, a)
		}
	}
	return out
}

// IsLearnArm says arm name is a learner's (it serves a learnt version).
func IsLearnArm(name string) bool { return strings.HasPrefix(name, config.LearnArmPrefix) }

func learnArmName(version int) string { return config.LearnArmPrefix + strconv.Itoa(version) }

func (l *Learner) readState(ctx context.Context) (*state, error) {
	b, err := l.store.Get(ctx, stateName)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", stateName, l.store.Location(), err)
	}
	if st.Experiment != l.exp {
		return nil, nil // another experiment's learner: nothing of it is served here
	}
	return &st, nil
}

func (l *Learner) writeState(ctx context.Context, st *state) error {
	st.Gen++
	st.UpdatedAt = l.now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := l.store.Put(ctx, stateName, append(b, '\n')); err != nil {
		st.Gen--
		return fmt.Errorf("learn state in %s: %w", l.store.Location(), err)
	}
	return nil
}
