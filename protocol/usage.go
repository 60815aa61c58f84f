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
		k.Set(&u, key.Str, n)
		return true
	})
	return u
}

// Counts reports whether key names one of the counts: a reader walking the object
// itself builds a value only for those members.
func (k UsageKeys) Counts(key string) bool { return key == k.Input || key == k.Output }

// Set takes n, the value of the usage object's member key, into u when key names one
// of the counts: the one mapping of members to counts, for Read and for readers that
// walk the object's bytes themselves (jsontext.ReadUsage).
func (k UsageKeys) Set(u *Usage, key string, n gjson.Result) {
	switch key {
	case k.Input:
		u.InputTokens = n.Int()
	case k.Output:
		u.OutputTokens = n.Int()
	}
}
