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
