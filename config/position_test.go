package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyntaxErrorPosition: a YAML syntax error names the line and column of the
// problem, not the line its enclosing block starts on (the parser's), and a tab in
// the indentation is named.
func TestSyntaxErrorPosition(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"mis-indented line 3",
			"server:\n  listen: \"127.0.0.1:8080\"\n   admin_listen: \"127.0.0.1:9090\"\n",
			"invalid YAML: line 3, column 4: did not find expected key; this line is indented 3 spaces where line 2 has 2"},
		{"tab indents line 3",
			"server:\n  listen: \"127.0.0.1:8080\"\n\tadmin_listen: \"127.0.0.1:9090\"\n",
			"invalid YAML: line 3, column 1: a tab character; YAML indents with spaces"},
		{"tab after spaces",
			"admin:\n  token: \"0123456789abcdef\"\nserver:\n  \tlisten: \":1\"\n",
			"invalid YAML: line 4, column 3: a tab character; YAML indents with spaces"},
		{"deeper block, error on line 6",
			"# camproxy\nexperiment:\n  name: ab\n  arms:\n    - {name: a, weight: 1, augmenter: none}\n   - {name: b, weight: 1, augmenter: none}\n",
			"invalid YAML: line 6, column 4: did not find expected key; this line is indented 3 spaces where line 5 has 4"},
		{"a flow list over three lines, then a bad line",
			"replay:\n  sinks: [\n    \"file:///tmp/r\",\n  ]\n  queue: 5\n  spool_dir: [x\n",
			"invalid YAML: line 6, column 3: did not find expected ',' or ']'"},
		{"unclosed quote",
			"server:\n  listen: \"127.0.0.1:8080\n  admin_listen: \":1\"\n",
			"invalid YAML: line 2, column 3: did not find expected key"},
		{"mapping value on the first line",
			"server: listen: x\n",
			"invalid YAML: line 1, column 1: mapping values are not allowed in this context"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), noEnv)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse error\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestFieldErrorPositions: every problem names where the file sets the key, and an
// unknown key the known key it was probably meant to be.
func TestFieldErrorPositions(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"swapped letters",
			"server:\n  listen: \"127.0.0.1:8080\"\nadmin:\n  loopback_only: true\n  tokne: \"0123456789abcdef\"\n",
			"line 5, column 3: admin.tokne: unknown key; did you mean admin.token?"},
		{"camelCase",
			"server: {maxBodyBytes: 10}",
			"line 1, column 10: server.maxBodyBytes: unknown key; did you mean server.max_body_bytes?"},
		{"dashes",
			"server:\n  max-body-bytes: 10\n",
			"line 2, column 3: server.max-body-bytes: unknown key; did you mean server.max_body_bytes?"},
		{"top-level section",
			"servre:\n  listen: \":1\"\n",
			"line 1, column 1: servre: unknown key; did you mean server?"},
		{"nothing close",
			"server:\n  colour: blue\n",
			"line 2, column 3: server.colour: unknown key"},
		{"only the keys of the augmenter's type",
			"augmenters:\n  kb:\n    type: rag\n    guidance_file: g.jsonl\n    top_l: 3\n",
			"line 5, column 5: augmenters.kb.top_l: unknown key; did you mean augmenters.kb.top_k?"},
		{"in a list",
			"experiment:\n  arms:\n    - {name: a, wieght: 1, augmenter: none}\n    - {name: b, weight: 1, augmenter: none}\n",
			"line 3, column 17: experiment.arms[0].wieght: unknown key; did you mean experiment.arms[0].weight?"},
		{"wrong type",
			"server:\n  max_body_bytes: lots\n",
			"line 2, column 19: server.max_body_bytes: expected an integer, got \"lots\""},
		{"duplicate",
			"server:\n  listen: \":1\"\n  listen: \":2\"\n",
			"line 3, column 3: server.listen: duplicate key; first set on line 2"},
		{"an invalid value",
			"experiment:\n  name: ab\n  arms:\n    - name: a\n      weight: 1\n      augmenter: camx\n",
			"line 6, column 18: experiment.arms[0].augmenter: \"camx\" is not defined in augmenters"},
		{"a missing key, at its section",
			"augmenters:\n  kb:\n    guidance_file: g.jsonl\n",
			"line 3, column 5: augmenters.kb.type: required; supported: cam, rag, playbook"},
		{"an empty list",
			"experiment: {arms: []}",
			"line 1, column 20: experiment.arms: at least one arm is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), noEnv)
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("Parse error\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestLoadSaysConfigOnce: a config file's error names it once ("config: config: open"
// was printed), and several problems are listed each on its own line.
func TestLoadSaysConfigOnce(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  listn: x\nadmin:\n  tokne: y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	for _, tt := range []struct{ path, want string }{
		{missing, "config: open " + missing + ": no such file or directory"},
		{bad, "config " + bad + ": 2 problems:\n" +
			"  line 2, column 3: server.listn: unknown key; did you mean server.listen?\n" +
			"  line 4, column 3: admin.tokne: unknown key; did you mean admin.token?"},
	} {
		_, err := Load(tt.path, noEnv)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Load(%s)\n got %v\nwant %s", filepath.Base(tt.path), err, tt.want)
		}
	}
	_, err := Load(bad, noEnv)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Key != "server.listn" {
		t.Errorf("Load's error does not unwrap to its *FieldError: %v", err)
	}
}

// TestNoPositionWithoutAFile: a Config built in code has no file positions.
func TestNoPositionWithoutAFile(t *testing.T) {
	c := Default()
	c.Server.MaxBodyBytes = 0
	if err := c.Validate(); err == nil || err.Error() != "server.max_body_bytes: must be > 0, got 0" {
		t.Errorf("Validate() = %v", err)
	}
}
