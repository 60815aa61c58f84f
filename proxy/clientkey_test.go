package proxy

import "testing"

// TestClientKey: a key from a file or an argument is the credential Credential reads
// off a call: a trailing newline, surrounding spaces and a Bearer scheme dropped.
func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"sk-research": "sk-research", "sk-research\n": "sk-research", "  sk-research \r\n": "sk-research",
		"Bearer sk-research": "sk-research", "bearer  sk-research\n": "sk-research", " \n": "", "": "",
	} {
		if got := string(ClientKey([]byte(in))); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", in, got, want)
		}
	}
}
