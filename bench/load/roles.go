package main

import (
	"context"
	"runtime/pprof"
)

// Goroutine labels for -cpuprofile: the agent's callers, the fake upstream's and the
// floor's server goroutines carry role, so that a profile tells camproxy's own CPU
// from theirs (they share fasthttp's functions): camproxy alone is
// -tagignore 'role=agent|upstream|floor', the floor alone -tagfocus role=floor.
var (
	agentRole    = pprof.WithLabels(context.Background(), pprof.Labels("role", "agent"))
	upstreamRole = pprof.WithLabels(context.Background(), pprof.Labels("role", "upstream"))
	floorRole    = pprof.WithLabels(context.Background(), pprof.Labels("role", "floor"))
)
