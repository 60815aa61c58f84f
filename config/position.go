package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file puts positions and suggestions on config errors: where in the file a
// syntax error is (the YAML library reports the line its enclosing block starts on,
// and no column), where each bad key is, and which known key an unknown one was
// probably meant to be.

// syntaxError turns the YAML parser's err about data into an error naming the line
// and column of the problem. The parser's own line is where the enclosing block
// starts (a mis-indented line 3 under "server:" is reported at line 1), so the line
// is found again: it is the one after the longest prefix of whole lines that still
// parses. A prefix that ends inside a multi-line construct (a flow list, a quoted
// string) may fail although the whole is fine, so prefixes are tried from the
// longest down, and a failing parse stops at its error, which keeps this cheap.
func syntaxError(data []byte, err error) error {
	lines := bytes.SplitAfter(data, []byte("\n"))
	bad := 1
	for k := len(lines) - 1; k > 0; k-- {
		if parses(bytes.Join(lines[:k], nil)) {
			bad = k + 1
			break
		}
	}
	if bad > len(lines) {
		bad = len(lines)
	}
	line := string(bytes.TrimRight(lines[bad-1], "\r\n"))
	indent := len(line) - len(strings.TrimLeft(line, " \t"))
	if tab := strings.IndexByte(line[:indent], '\t'); tab >= 0 {
		return fmt.Errorf("line %d, column %d: a tab character; YAML indents with spaces", bad, tab+1)
	}
	msg := yamlProblem(err)
	if hint := indentHint(lines, bad, indent); hint != "" {
		msg += "; " + hint
	}
	return fmt.Errorf("line %d, column %d: %s", bad, indent+1, msg)
}

// parses reports whether every document in data parses.
func parses(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// yamlProblem is the parser's message without its "yaml: line N: " prefix, whose
// line is the enclosing block's.
func yamlProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			if _, err := strconv.Atoi(rest[:i]); err == nil {
				msg = rest[i+2:]
			}
		}
	}
	return msg
}

// indentHint names an indentation that differs from the line above's when the line
// above opens no block: the usual cause of "did not find expected key" and
// "mapping values are not allowed in this context".
func indentHint(lines [][]byte, bad, indent int) string {
	for i := bad - 2; i >= 0; i-- {
		prev := strings.TrimRight(string(lines[i]), "\r\n")
		body := strings.TrimLeft(prev, " ")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		pi := len(prev) - len(body)
		opens := strings.HasSuffix(body, ":") || strings.HasSuffix(body, "|") || strings.HasSuffix(body, ">") || body == "-"
		if pi == indent || opens && indent > pi {
			return ""
		}
		return fmt.Sprintf("this line is indented %d spaces where line %d has %d", indent, i+1, pi)
	}
	return ""
}

// locate sets the position of each *FieldError in errs that has none to where the
// document rooted at root sets its key, or to the nearest enclosing key the document
// sets (a required key that is missing is reported where its section is). A key the
// document does not mention at all keeps no position: it is a default.
func locate(root *yaml.Node, errs []error) {
	for _, err := range errs {
		fe, ok := err.(*FieldError)
		if !ok || fe.Line > 0 || fe.Key == "" {
			continue
		}
		if n := find(root, fe.Key); n != nil {
			fe.Line, fe.Column = n.Line, n.Column
		}
	}
}

// find returns the node of the deepest part of the dotted key ("a.b[2].c") that the
// document sets below its root, or nil.
func find(root *yaml.Node, key string) *yaml.Node {
	var found *yaml.Node
	n := resolveAlias(root)
	for part := range strings.SplitSeq(key, ".") {
		name, idx, _ := strings.Cut(part, "[")
		n = mappingChild(n, name)
		if n == nil {
			return found
		}
		found = n
		for idx != "" { // [i] or [i][j]
			var num string
			num, idx, _ = strings.Cut(idx, "]")
			idx = strings.TrimPrefix(idx, "[")
			i, err := strconv.Atoi(num)
			if n.Kind != yaml.SequenceNode || err != nil || i < 0 || i >= len(n.Content) {
				return found
			}
			n = resolveAlias(n.Content[i])
			found = n
		}
	}
	return found
}

// mappingChild returns the value of key in mapping n (merge keys followed), or nil.
func mappingChild(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolveAlias(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Value == key && !isMergeKey(k) {
			return resolveAlias(n.Content[i+1])
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if isMergeKey(resolveAlias(n.Content[i])) {
			for _, m := range mergeSources(n.Content[i+1]) {
				if v := mappingChild(m, key); v != nil {
					return v
				}
			}
		}
	}
	return nil
}

// knownKeys lists the keys of a struct's fields, for an augmenter of type typ only
// those that apply to it.
func knownKeys(fields map[string]reflect.Type, typ string) []string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if only := augmenterOnly[k]; typ == "" || only == "" || only == typ {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
