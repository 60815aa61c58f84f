package protocol

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestUsageKeysRead(t *testing.T) {
	chat := UsageKeys{Input: "prompt_tokens", Output: "completion_tokens"}
	tests := []struct {
		json string
		want Usage
	}{
		{`{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}`, Usage{12, 3}},
		{`{"prompt_tokens":1,"prompt_tokens":7}`, Usage{InputTokens: 7}}, // the last wins
		{`{"input_tokens":5,"output_tokens":6}`, Usage{}},                // another wire's keys
		{`[12,3]`, Usage{}},
		{`null`, Usage{}},
		{``, Usage{}},
	}
	for _, tt := range tests {
		if got := chat.Read(gjson.Parse(tt.json)); got != tt.want {
			t.Errorf("Read(%s) = %+v; want %+v", tt.json, got, tt.want)
		}
	}
}
