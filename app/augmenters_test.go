package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
)

// TestRAGAndPlaybookArms: rag and playbook augmenters serve their context through
// the proxy like a CAM does.
func TestRAGAndPlaybookArms(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "guidance.jsonl")
	if err := os.WriteFile(store, []byte(
		`{"task_id": 1, "task_description": "cancel reservation for a passenger", "guidance": "Check the fare rules before cancelling."}`+"\n"+
			`{"task_id": 2, "task_description": "book a one-way flight in economy", "guidance": "Search direct flights first."}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	book := filepath.Join(dir, "playbook.txt")
	if err := os.WriteFile(book, []byte("## STRATEGIES\n[s-1] helpful=3 harmful=0 :: Read the policy first.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ arm, want string }{
		{"kb", "Cancel reservation 4WQ150 for Ethan.\n\nCheck the fare rules before cancelling."},
		{"ace", "Cancel reservation 4WQ150 for Ethan.\n\n## STRATEGIES\n- Read the policy first."},
	} {
		t.Run(tt.arm, func(t *testing.T) {
			e := newEnv(t, func(cfg *config.Config) {
				kb := config.DefaultAugmenter()
				kb.Type, kb.GuidanceFile = config.AugmenterRAG, store
				ace := config.DefaultAugmenter()
				ace.Type, ace.File = config.AugmenterPlaybook, book
				cfg.Augmenters = map[string]config.Augmenter{"kb": kb, "ace": ace}
				cfg.Experiment.Arms = []config.Arm{{Name: tt.arm, Weight: 1, Augmenter: tt.arm}}
			})
			h := e.turn(newAgent("Cancel reservation 4WQ150 for Ethan.", false))
			if got := h.Get("X-CAM-Context"); got != "miss" {
				t.Errorf("X-CAM-Context %q, want miss", got)
			}
			if got := splicedTask(e.up.Last().Body); got != tt.want {
				t.Errorf("upstream task message %q, want %q", got, tt.want)
			}
			if e.cam.Calls() != 0 {
				t.Errorf("the CAM was called %d times", e.cam.Calls())
			}
		})
	}
}

// TestFileAugmenterUnreadable: a guidance store or playbook that cannot be read is
// not a config error, but New refuses to start, naming the augmenter and the file.
func TestFileAugmenterUnreadable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	for _, typ := range []string{config.AugmenterRAG, config.AugmenterPlaybook} {
		t.Run(typ, func(t *testing.T) {
			cfg := config.Default()
			a := config.DefaultAugmenter()
			a.Type, a.GuidanceFile, a.File = typ, "", ""
			if typ == config.AugmenterRAG {
				a.GuidanceFile = missing
			} else {
				a.File = missing
			}
			cfg.Augmenters = map[string]config.Augmenter{"kb": a}
			cfg.Experiment.Arms = []config.Arm{{Name: "kb", Weight: 1, Augmenter: "kb"}}
			dir := t.TempDir()
			cfg.Replay.Sinks = []string{"file://" + dir + "/replay"}
			cfg.Replay.SpoolDir = dir + "/spool"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v; an unreadable file is not a config error", err)
			}
			app, err := New(cfg, Options{Logger: testLogger(t)})
			if err == nil {
				_ = app.Shutdown(t.Context())
				t.Fatal("New succeeded with an unreadable file")
			}
			if !strings.Contains(err.Error(), "augmenters.kb") || !strings.Contains(err.Error(), missing) {
				t.Errorf("error %q does not name augmenters.kb and %s", err, missing)
			}
		})
	}
}

// TestGuidanceReloadReachesNewEpisodes: a rewritten guidance store changes the rag
// augmenter's version, so new episodes of an already cached task get the new guidance.
func TestGuidanceReloadReachesNewEpisodes(t *testing.T) {
	store := filepath.Join(t.TempDir(), "guidance.jsonl")
	write := func(g string) {
		line := `{"task_id": 1, "task_description": "cancel reservation for a passenger", "guidance": "` + g + `"}` + "\n"
		if err := os.WriteFile(store, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Old guidance.")
	e := newEnv(t, func(cfg *config.Config) {
		kb := config.DefaultAugmenter()
		kb.Type, kb.GuidanceFile = config.AugmenterRAG, store
		cfg.Augmenters = map[string]config.Augmenter{"kb": kb}
		cfg.Experiment.Arms = []config.Arm{{Name: "kb", Weight: 1, Augmenter: "kb"}}
	})
	const task = "Cancel reservation 4WQ150 for Ethan."
	e.turn(newAgent(task, false))
	if got := splicedTask(e.up.Last().Body); !strings.HasSuffix(got, "Old guidance.") {
		t.Fatalf("first episode: %q", got)
	}
	time.Sleep(1100 * time.Millisecond) // the store is checked at most once a second
	write("New guidance, longer than the old one.")
	if !waitFor(t, func() bool {
		e.turn(newAgent(task, false))
		return strings.HasSuffix(splicedTask(e.up.Last().Body), "New guidance, longer than the old one.")
	}) {
		t.Fatalf("new episodes still get %q after the store changed", splicedTask(e.up.Last().Body))
	}
}
