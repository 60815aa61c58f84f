package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// Final answers of the agent's second turn. They name neither outcome word, so the
// optimiser's grep for ACCEPTED/REJECTED finds the tool result alone.
const (
	doneAnswer   = "Done: the request went through."
	failedAnswer = "I could not complete the request."
)

// AgentReply is the scripted agent as an upstream's script (testkit.Upstream.Reply):
// on the first turn it calls submit with the code its context gives (Decide); once
// the tool result is in, it answers in text. It keeps no state: everything it needs
// is in the request, as with a real model.
func (e *Env) AgentReply(body gjson.Result) testkit.Reply {
	msgs := body.Get("messages").Array()
	if n := len(msgs); n > 0 && msgs[n-1].Get("role").String() == "tool" {
		if strings.HasPrefix(text(msgs[n-1].Get("content")), Accepted) {
			return testkit.Reply{Content: doneAnswer}
		}
		return testkit.Reply{Content: failedAnswer}
	}
	task := ""
	for _, m := range msgs {
		if m.Get("role").String() == "user" {
			task = text(m.Get("content"))
			break
		}
	}
	args, _ := json.Marshal(map[string]string{"code": e.Decide(task)})
	// The call id is the task's: it only has to be unique within the conversation.
	sum := sha256.Sum256([]byte(task))
	return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "call_" + hex.EncodeToString(sum[:6]), Name: ToolSubmit, Arguments: string(args)}}}
}

// text is a message content as text: a string, or the text parts of a parts array.
func text(c gjson.Result) string {
	if c.IsArray() {
		var b strings.Builder
		for _, p := range c.Array() {
			if p.Get("type").String() == "text" {
				b.WriteString(p.Get("text").String())
			}
		}
		return b.String()
	}
	return c.String()
}
