package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/camproxy/camproxy/episode"
)

// TestGetEpisode: a store that reads into the caller's storage (episode.Memory) fills
// the call's episode; any other (Redis, Fallback) hands out its own copy, as before.
// Both read the same episode, and neither finds one it does not know.
func TestGetEpisode(t *testing.T) {
	ctx := context.Background()
	m := episode.NewMemory(time.Minute, nil)
	defer m.Close()
	want := episode.Episode{ID: "a", Arm: "cam", Context: "text", Turns: 2}
	_, _, _ = m.Create(ctx, &want)
	for _, c := range []struct {
		name  string
		store episode.Store
		into  bool
	}{{"memory", m, true}, {"other", struct{ episode.Store }{m}, false}} {
		t.Run(c.name, func(t *testing.T) {
			s := &Server{episodes: c.store}
			var dst episode.Episode
			ep, err := s.getEpisode(ctx, "a", &dst)
			if err != nil || *ep != want {
				t.Fatalf("getEpisode = %+v, %v; want %+v", ep, err, want)
			}
			if (ep == &dst) != c.into || (dst == want) != c.into {
				t.Fatalf("read into the call's storage: %v, want %v", ep == &dst, c.into)
			}
			if _, err := s.getEpisode(ctx, "unknown", &dst); !errors.Is(err, episode.ErrNotFound) {
				t.Fatalf("unknown episode: %v", err)
			}
		})
	}
}
