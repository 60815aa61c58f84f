package online

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the learners' series, labelled by experiment: one Metrics serves every
// learner of a process.
type Metrics struct {
	steps, guidance             *prometheus.CounterVec
	decisions                   *prometheus.CounterVec // experiment, action
	version, leader, candidates *prometheus.GaugeVec
}

// NewMetrics makes the series and registers them with reg (nil: nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	exp := []string{"experiment"}
	m := &Metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_steps_total",
			Help: "Optimiser steps this replica ran (as the learner lease holder), by experiment."}, exp),
		guidance: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_guidance_total",
			Help: "Guidance records the learner appended to learn.guidance_file (tasks whose runs now have mixed outcomes), by experiment."}, exp),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_decisions_total",
			Help: "Learner decisions this replica made, by experiment and action (version, candidate, promoted, stopped)."}, []string{"experiment", "action"}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_version",
			Help: "The playbook version of the champion arm this replica serves, by experiment."}, exp),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_leader",
			Help: "1 while this replica holds the experiment's learner lease."}, exp),
		candidates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_candidates",
			Help: "Candidate arms this replica serves, by experiment."}, exp),
	}
	if reg != nil {
		reg.MustRegister(m.steps, m.guidance, m.decisions, m.version, m.leader, m.candidates)
	}
	return m
}

// Forget drops an experiment's series: its learner stopped (the label's values are
// the configured experiments' only).
func (m *Metrics) Forget(exp string) {
	l := prometheus.Labels{"experiment": exp}
	m.steps.DeletePartialMatch(l)
	m.guidance.DeletePartialMatch(l)
	m.decisions.DeletePartialMatch(l)
	m.version.DeletePartialMatch(l)
	m.leader.DeletePartialMatch(l)
	m.candidates.DeletePartialMatch(l)
}

// series are one experiment's.
type series struct {
	steps, guidance             prometheus.Counter
	decisions                   *prometheus.CounterVec // action
	version, leader, candidates prometheus.Gauge
}

func (m *Metrics) of(exp string) series {
	return series{steps: m.steps.WithLabelValues(exp), guidance: m.guidance.WithLabelValues(exp),
		decisions: m.decisions.MustCurryWith(prometheus.Labels{"experiment": exp}),
		version:   m.version.WithLabelValues(exp), leader: m.leader.WithLabelValues(exp), candidates: m.candidates.WithLabelValues(exp)}
}
