package protocol

import "github.com/tidwall/gjson"

// UsageKeys names the members of a wire's usage object that count the input and
// the output tokens: {"prompt_tokens","completion_tokens"} for chat completions,
// {"input_tokens","output_tokens"} for Responses, {"inputTokens","outputTokens"}
// for Converse.
type UsageKeys struct{ Input, Output string }

// Read reads the token counts of the usage object v; zero when v is not an object.
// On duplicate keys the last one wins, as in the decoders upstream.
func (k UsageKeys) Read(v gjson.Result) Usage {
	var u Usage
	if !v.IsObject() {
		return u
	}
	v.ForEach(func(key, n gjson.Result) bool {
		switch key.Str {
		case k.Input:
			u.InputTokens = n.Int()
		case k.Output:
			u.OutputTokens = n.Int()
		}
		return true
	})
	return u
}
