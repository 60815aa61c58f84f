package inject

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDefaultImage(t *testing.T) {
	for v, want := range map[string]string{"": "ghcr.io/camproxy/camproxy:latest", "dev": "ghcr.io/camproxy/camproxy:latest",
		"v1.4.0": "ghcr.io/camproxy/camproxy:v1.4.0"} {
		if got := DefaultImage(v); got != want {
			t.Errorf("DefaultImage(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestDefaultNamespace: a set namespace stays; else $POD_NAMESPACE, else the service
// account's, else "default" for a self-signed pair and none for a mounted one.
func TestDefaultNamespace(t *testing.T) {
	sa := t.TempDir()
	if err := os.WriteFile(filepath.Join(sa, "namespace"), []byte("from-sa\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) (string, bool) { return "from-env", k == "POD_NAMESPACE" }
	noEnv := func(string) (string, bool) { return "", false }
	none := filepath.Join(sa, "absent")
	for _, c := range []struct {
		name   string
		set    string
		mount  bool
		getenv func(string) (string, bool)
		saDir  string
		want   string
	}{
		{"set", "platform", false, env, sa, "platform"},
		{"environment", "", false, env, sa, "from-env"},
		{"service account", "", false, noEnv, sa, "from-sa"},
		{"self-signed", "", false, noEnv, none, "default"},
		{"mounted pair", "", true, noEnv, none, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := DefaultServerConfig()
			sc.Namespace = c.set
			if c.mount {
				sc.CertFile, sc.KeyFile = "tls.crt", "tls.key"
			}
			sc.DefaultNamespace(c.getenv, c.saDir)
			if sc.Namespace != c.want {
				t.Errorf("namespace %q, want %q", sc.Namespace, c.want)
			}
		})
	}
}
