package protocol

import "regexp"

// TaskRule finds the task text inside a conversation. Exactly one of Regex and
// FirstUserMessage is set. The first rule that matches wins.
type TaskRule struct {
	// Regex is matched against the text of each system, developer and user message
	// in order; its single capture group is the task.
	Regex *regexp.Regexp
	// FirstUserMessage takes the whole text of the first user message.
	FirstUserMessage bool
}

// DefaultTaskRules is the built-in rule list: the first user message.
func DefaultTaskRules() []TaskRule { return []TaskRule{{FirstUserMessage: true}} }

// FirstMatch applies rules in order until one matches: regex tries a regex rule,
// firstUser the first-user-message rule, each reporting whether it set the task.
// Every adapter finds its task through it, so the rule semantics live in one place.
func FirstMatch(rules []TaskRule, regex func(*regexp.Regexp) bool, firstUser func() bool) {
	for _, rule := range rules {
		switch {
		case rule.Regex != nil:
			if regex(rule.Regex) {
				return
			}
		case rule.FirstUserMessage:
			if firstUser() {
				return
			}
		}
	}
}
