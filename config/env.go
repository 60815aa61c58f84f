package config

import (
	"errors"
	"fmt"
	"strings"
)

// expandEnv replaces ${VAR} and ${VAR:-default} in the raw config text with
// values from getenv, and $$ with a literal $. A bare $VAR is left alone. As in
// the shell, the default applies when VAR is unset or empty. The substitution is
// textual, so a value holding YAML syntax (": ", "#", a newline) should sit
// inside quotes in the file. Every unset variable is reported, each with its line.
// Whole-line comments are copied as they are: a commented-out ${KEY} must not fail.
func expandEnv(text string, getenv func(string) (string, bool)) (string, error) {
	var (
		b    strings.Builder
		errs []error
		line = 1
	)
	b.Grow(len(text))
	for i := 0; i < len(text); {
		if i == 0 || text[i-1] == '\n' {
			if rest := strings.TrimLeft(text[i:], " \t"); strings.HasPrefix(rest, "#") {
				end := strings.IndexByte(text[i:], '\n')
				if end < 0 {
					end = len(text) - i
				}
				b.WriteString(text[i : i+end])
				i += end
				continue
			}
		}
		c := text[i]
		switch {
		case c == '\n':
			line++
		case c == '$' && strings.HasPrefix(text[i:], "$$"):
			b.WriteByte('$')
			i += 2
			continue
		case c == '$' && strings.HasPrefix(text[i:], "${"):
			expr, ok := braced(text[i+2:])
			if !ok {
				errs = append(errs, fmt.Errorf("line %d: unterminated \"${\"", line))
				return "", errors.Join(errs...)
			}
			value, err := lookupEnv(expr, getenv)
			if err != nil {
				errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			}
			b.WriteString(value)
			i += len("${") + len(expr) + len("}")
			continue
		}
		b.WriteByte(c)
		i++
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return b.String(), nil
}

// braced returns the text up to the first '}' on the same line.
func braced(s string) (string, bool) {
	end := strings.IndexAny(s, "}\n")
	if end < 0 || s[end] != '}' {
		return "", false
	}
	return s[:end], true
}

// lookupEnv resolves the inside of one ${…}.
func lookupEnv(expr string, getenv func(string) (string, bool)) (string, error) {
	name, def, hasDefault := strings.Cut(expr, ":-")
	if !isEnvName(name) {
		return "", fmt.Errorf("invalid variable reference \"${%s}\"; use ${NAME} or ${NAME:-default}, and $$ for a literal $", expr)
	}
	value, set := getenv(name)
	switch {
	case set && (value != "" || !hasDefault):
		return value, nil
	case hasDefault:
		return def, nil
	default:
		return "", fmt.Errorf("environment variable %s is not set (write ${%s:-default} to give a default)", name, name)
	}
}

// isEnvName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func isEnvName(s string) bool {
	for i, r := range s {
		letter := r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}
