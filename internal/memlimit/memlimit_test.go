package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	n := 0
	write := func(s string) string {
		n++
		p := filepath.Join(dir, "memory.max."+string(rune('a'+n)))
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noEnv := func(string) (string, bool) { return "", false }
	withEnv := func(k string) (string, bool) { return "400MiB", k == "GOMEMLIMIT" }
	tests := []struct {
		name   string
		file   string
		getenv func(string) (string, bool)
		want   int64
	}{
		{"512 MiB container", write("536870912\n"), noEnv, 536870912 / 10 * 9},
		{"GOMEMLIMIT set wins", write("536870912\n"), withEnv, 0},
		{"no limit", write("max\n"), noEnv, 0},
		{"no cgroup v2 file", filepath.Join(dir, "absent"), noEnv, 0},
		{"garbage", write("lots"), noEnv, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Limit(tt.file, tt.getenv); got != tt.want {
				t.Fatalf("Limit = %d, want %d", got, tt.want)
			}
		})
	}
}
