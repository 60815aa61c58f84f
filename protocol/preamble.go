package protocol

import (
	"regexp"
	"slices"
	"strings"
)

// A setup preamble is a harness's own opening text that only describes where the
// agent runs — working directory, date, operating system, shell, a folder listing —
// and asks for nothing: the Gemini CLI sends one as the first text of the first user
// message (protocol/testdata/preamble), its forks over chat completions do the same.
// Unlike the built-in envelopes it has no fixed marker, so it is told by structure:
// every line of it is a "key: value" or "key is value" line about the environment, a
// path, a line of a folder tree, a wrapper tag or a fixed setup phrase; at least two
// kinds of environment fact appear; and no line reads as a request (a question, or a
// sentence that opens with a request verb). first_user_message skips a leading text
// that is one (setupPreamble) and takes the next, so that the task is the request and
// tasks run in one folder get different ids. A text of one line is never one, nor is
// a text with more than a quarter of its lines of anything else: a real request that
// mentions a directory stays the task.

// preambleKinds are the environment facts a preamble line may state, each told by
// how the line starts (after list markers and ** are removed): the label task
// explain prints, and the pattern. A key line is the key, then ":" "=" "is" or the
// end of the line (a heading such as "Directory Structure:").
var preambleKinds = []struct {
	label string
	key   *regexp.Regexp
}{
	{"working directory", regexp.MustCompile(`(?i)^(?:(?:i'?m|i am|we are) (?:currently )?working in (?:the )?(?:director(?:y|ies)|folder)|(?:the |my |our )?(?:current |present )?(?:working )?(?:director(?:y|ies)|folder)|cwd|pwd|(?:the )?workspace(?:'s)?(?: director(?:y|ies)| root| folders?)?|(?:the )?project(?:'s)? (?:root|director(?:y|ies)|folder)|(?:the )?(?:project's |workspace's )?temporary directory)\b`)},
	{"date", regexp.MustCompile(`(?i)^(?:today'?s date|today is|(?:the )?(?:current )?date(?: and time)?|(?:the )?current time|time ?zone)\b`)},
	{"OS", regexp.MustCompile(`(?i)^(?:(?:my |the )?operating system|os(?: version)?|platform|kernel)\b`)},
	{"shell", regexp.MustCompile(`(?i)^(?:my |the )?(?:default )?shell\b`)},
	{"folder listing", regexp.MustCompile(`(?i)^(?:here is |here's )?(?:the )?(?:folder|directory|file|project) (?:structure|tree|listing|layout)\b`)},
}

var (
	// keyTail: what follows a key for the line to be a statement of it.
	keyTail = regexp.MustCompile(`(?i)^(?:'s)?\s*(?:of [^:]{1,60})?\s*(?:[:=]|\bis\b|\bare\b|$)`)
	// setupPhrases are the fixed sentences of known preambles, removed from a line
	// before it is judged: a line left with nothing but punctuation is setup.
	setupPhrases = regexp.MustCompile(`(?i)this is (?:the )?[\w .'-]{1,40}?\b(?:cli|code|agent|assistant)\b\.?|we are setting up the context for (?:our|this) (?:chat|session|conversation)\.?|showing up to \d+ items(?: \([^)]*\))?\.?|folders or files indicated with .*$|\(formatted according to [^)]*\)\.?`)
	// treeLine: a line of a folder tree (box-drawing glyphs, or an entry ending in /).
	treeLine = regexp.MustCompile(`[├└│─]|^[\w.@ +-]+/$|^(?:\.\.\.|…)$`)
	// pathLine: a bare absolute or home path.
	pathLine = regexp.MustCompile(`^(?:/|~/|[A-Za-z]:[\\/])\S*$`)
	// wrapperLine: an XML-ish tag or a code fence alone on its line.
	wrapperLine = regexp.MustCompile("^(?:</?[A-Za-z_][\\w-]*>|```\\w*)$")
	// requestLine: a sentence that opens with a request verb or a question word.
	requestLine = regexp.MustCompile(`(?i)(?:^|[.!;:]\s+)(?:please\s+)?(?:add|fix|write|create|make|build|implement|refactor|update|change|remove|delete|rename|move|explain|describe|summari[sz]e|list|show|find|tell|help|can|could|would|will|run|test|debug|review|check|look|investigate|generate|convert|translate|book|cancel|use|do|don't|i want|i need|i'd like|i would like|let's|how|what|why|where|when|which|who)\b`)
	// listMarker: a bullet or number before a line's text.
	listMarker = regexp.MustCompile(`^(?:[-*+•]|\d+[.)])\s+`)
)

// setupPreamble reports whether text is a setup preamble (see above) and the kinds
// of environment fact it states, in the order of preambleKinds.
func setupPreamble(text string) ([]string, bool) {
	if strings.IndexByte(text, '\n') < 0 {
		return nil, false // one line: never only scaffolding
	}
	var found [8]bool
	lines, env, other := 0, 0, 0
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || wrapperLine.MatchString(line) {
			continue
		}
		lines++
		if treeLine.MatchString(line) || pathLine.MatchString(line) {
			if treeLine.MatchString(line) {
				found[len(preambleKinds)-1] = true
			}
			env++
			continue
		}
		if strings.ContainsRune(line, '?') || requestLine.MatchString(line) {
			return nil, false // a question or a request: not scaffolding
		}
		bare := strings.TrimSpace(strings.ReplaceAll(listMarker.ReplaceAllString(line, ""), "**", ""))
		rest := strings.TrimSpace(setupPhrases.ReplaceAllString(bare, ""))
		if strings.Trim(rest, ".,;: ") == "" {
			if strings.Contains(strings.ToLower(bare), "showing up to") {
				found[len(preambleKinds)-1] = true
			}
			env++
			continue
		}
		kind := -1
		for i, k := range preambleKinds {
			if loc := k.key.FindStringIndex(rest); loc != nil && keyTail.MatchString(rest[loc[1]:]) {
				kind = i
				break
			}
		}
		if kind < 0 {
			other++
			continue
		}
		found[kind] = true
		env++
	}
	var kinds []string
	for i, k := range preambleKinds {
		if found[i] {
			kinds = append(kinds, k.label)
		}
	}
	if len(kinds) < 2 || env < 2 || other*4 > lines {
		return nil, false
	}
	return slices.Clip(kinds), true
}

// preambleNote is how task explain names what first_user_message skipped.
func preambleNote(kinds []string) string {
	return "skipped setup preamble (" + strings.Join(kinds, ", ") + ")"
}
