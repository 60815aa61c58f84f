package openai

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// decodeValidGJSON is decodeValid as it was written on gjson's walk (ParseBytes,
// ForEach on the root and on choices, readFields): the reference the one-pass
// decoder must agree with, and the baseline of its benchmark in the same run.
func decodeValidGJSON(body []byte) (protocol.Message, protocol.Usage, error) {
	root := gjson.ParseBytes(body)
	var choices, usage gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			choices = v
		case "usage":
			usage = v
		}
		return true
	})
	u := usageKeys.Read(usage)
	var msg gjson.Result
	if choices.IsArray() {
		choices.ForEach(func(_, c gjson.Result) bool {
			if c.IsObject() {
				msg = jsontext.ObjectKey(c, "message")
			}
			return false // choices[0] only
		})
	}
	if !msg.IsObject() {
		return protocol.Message{}, u, errNoChoice
	}
	f := readFields(msg)
	return answer(&f), u, nil
}

// chatCompletion is a realistic non-streamed answer (tau-bench airline, gpt-4o).
const chatCompletion = `{
  "id": "chatcmpl-AkVrAbCdEfGhIjKlMnOpQrStUvWx",
  "object": "chat.completion",
  "created": 1735689600,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "I have found your reservation 4WQ150 from JFK to SEA on May 20.\n\nBefore I cancel it, please confirm:\n- Reservation: 4WQ150\n- Refund: $183 to certificate_7504069\n\nShall I proceed? (yes/no)",
        "refusal": null
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 4012,
    "completion_tokens": 61,
    "total_tokens": 4073,
    "prompt_tokens_details": {"cached_tokens": 3840, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "system_fingerprint": "fp_50cad350e4"
}`

// responseSeeds are answers of every shape decodeAnswer reads, and odd ones.
var responseSeeds = []string{
	chatCompletion,
	`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \u00e9","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"fp"}`,
	`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_user_details","arguments":"{\"user_id\":\"mia\"}"}}]},"finish_reason":"tool_calls"},{"index":1,"message":{"role":"assistant","content":"other"}}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`,
	`{"choices":[{"message":{"content":"x"}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"b"}]}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":"","refusal":"I can't","reasoning_content":"think","reasoning":{"summary":"s"}}}]}`,
	`{"choices":[{"message":{"role":"assistant","function_call":{"name":"f","arguments":{"a":1}}}}],"usage":{"prompt_tokens":"7","completion_tokens":1.5e1}}`,
	`{"choices":[{"message":{"role":"assistant","tool_calls":[{"type":"custom","custom":{"name":"sh","input":"ls\n"}},7,{"id":"x"}]}}]}`,
	`{"choices":[{"message":{"role":"a"},"message":{"role":"b","content":"last wins"}}],"choices":{"not":"an array"}}`,
	`{"choices":{"message":{}},"choices":[{"message":{"content":"second"}}],"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"ch\u006fices":[{"mess\u0061ge":{"r\u006fle":"assistant","content":"escaped keys"}}],"us\u0061ge":{"prompt_tokens":3,"prompt_tokens":4}}`,
	`{"choices":[7,{"message":{"content":"not first"}}]}`,
	`{"choices":[{"message":null}],"usage":{"prompt_tokens":3,"completion_tokens":0}}`,
	`{"choices":[],"usage":[1]}`,
	`{"error":{"message":"rate limited","type":"requests"}}`,
	` [1] `,
	`"choices"`,
	` {"choices" : [ { "message" : { "role" : "assistant" , "content" : "spaced\ud83d\ude00\ud800" } } ] } `,
}

func TestDecodeValidMatchesReference(t *testing.T) {
	for _, body := range responseSeeds {
		checkDecodeValid(t, []byte(body))
	}
}

// FuzzDecodeValidMatchesReference: on every valid body the one-pass decoder gives
// what gjson's walk gives, message, usage and error alike, and what it returns does
// not alias the body; on every body it judges validity as jsontext.Validate does.
func FuzzDecodeValidMatchesReference(f *testing.F) {
	for _, body := range responseSeeds {
		f.Add([]byte(body))
	}
	for _, body := range answerBreakers {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsontext.Validate(body) != nil {
			checkRejected(t, body)
			return
		}
		checkDecodeValid(t, body)
	})
}

// answerBreakers are answers not valid JSON, most of them broken where the one pass
// reads (in choices[0].message, in usage, between the root's members) rather than
// where it only validates.
var answerBreakers = []string{
	``, ` `, `{`, `{"choices":[`, `{"choices":[{"message":{"role":"assistant","content":"x"}}]`,
	`{"choices":[{"message":{"role":"assistant","content":"x"}}]}x`, `{"choices":[{"message":{"role":"assistant","content":"x}}]}`,
	`{"choices":[{"message":{"role":"assistant","content":"x"},}]}`, `{"choices":[{"message":{"role":"assistant","content":"x"}},]}`,
	`{"choices":[{"message":{"role":"assistant","content":"\x"}}]}`, "{\"choices\":[{\"message\":{\"content\":\"a\x01\"}}]}",
	"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}", "{\"id\":\"\xc3\",\"choices\":[]}",
	`{"choices":[{"message":{"content":"x"}} {"message":{}}]}`, `{"choices":[{"message":{"content":"x"}}],}`,
	`{"choices":[{"message":{"content":"x"}}] "usage":{}}`, `{"usage":{"prompt_tokens":01}}`, `{"usage":{"prompt_tokens":1,}}`,
	`{"usage":{"prompt_tokens" 1}}`, `{"usage":{prompt_tokens:1}}`, `{"usage":[1,]}`, `{"usage":tru}`, `{"choices":[7,]}`,
	`{"choices":[{"message":{"content":"x"}},{"message":}]}`, `{"choices":{"message":{"content":"x"},}}`, `{"choices":`,
	`{"choices" [{"message":{}}]}`, `{"choices":[{"message" {}}]}`, `{"choices":[{message:{}}]}`, `{"a":1 "choices":[]}`,
	`{"choices":[{"message":{"content":"x"}}]}}`, `{"choices":[{"message":{"content":"x"}}]]}`, `[1,]`, `nul`, `"x`,
}

// checkRejected: a body that is not valid JSON is no answer, and DecodeResponse
// gives the error jsontext.Validate gives for it.
func checkRejected(t *testing.T, body []byte) {
	t.Helper()
	want := jsontext.Validate(body)
	if _, _, ok, _ := decodeAnswer(body); ok {
		t.Fatalf("decodeAnswer(%q) took a body that is not valid JSON (%v)", body, want)
	}
	if _, _, err := DecodeResponse(body); err == nil || err.Error() != want.Error() || !errors.Is(err, protocol.ErrInvalidJSON) {
		t.Fatalf("DecodeResponse(%q) = %v, want %v", body, err, want)
	}
	var d JSONDecoder
	if _, _ = d.Write(body); d.Finished() {
		t.Fatalf("JSONDecoder finished on %q, not valid JSON", body)
	}
}

func TestDecodeAnswerRejectsInvalid(t *testing.T) {
	for _, body := range answerBreakers {
		if jsontext.Validate([]byte(body)) == nil {
			t.Fatalf("breaker %q is valid JSON", body)
		}
		checkRejected(t, []byte(body))
	}
}

// TestDecodeAnswerDepth: the one pass bounds nesting as jsontext.Validate does,
// counted from the root, wherever the deep value is: in the message it reads, in
// usage, in a member it skips, in a choice past the first.
func TestDecodeAnswerDepth(t *testing.T) {
	for _, n := range []int{jsontext.MaxDepth - 8, jsontext.MaxDepth - 4, jsontext.MaxDepth - 3, jsontext.MaxDepth - 2, jsontext.MaxDepth - 1, jsontext.MaxDepth} {
		deep := strings.Repeat("[", n) + strings.Repeat("]", n)
		for _, body := range []string{
			`{"choices":[{"message":{"role":"assistant","content":"x","tool_calls":` + deep + `}}]}`,
			`{"choices":[{"message":{"content":"x"},"logprobs":` + deep + `}]}`,
			`{"choices":[{"message":{"content":"x"}},` + deep + `]}`,
			`{"choices":` + deep + `}`,
			`{"usage":{"prompt_tokens":1,"details":` + deep + `}}`,
			`{"usage":` + deep + `}`,
			`{"x":` + deep + `,"choices":[{"message":{"content":"x"}}]}`,
			deep,
		} {
			if jsontext.Validate([]byte(body)) != nil {
				checkRejected(t, []byte(body))
			} else {
				checkDecodeValid(t, []byte(body))
			}
		}
	}
}

func checkDecodeValid(t *testing.T, body []byte) {
	t.Helper()
	if err := jsontext.Validate(body); err != nil {
		t.Fatalf("seed %q is not valid: %v", body, err)
	}
	wantM, wantU, wantErr := decodeValidGJSON(body)
	own := append([]byte(nil), body...)
	m, u, ok, err := decodeAnswer(own)
	if !ok || (err == nil) != (wantErr == nil) || u != wantU || !reflect.DeepEqual(m, wantM) {
		t.Fatalf("decodeAnswer(%s)\n = %#v, %+v, %v, %v\nwant %#v, %+v, %v", body, m, u, ok, err, wantM, wantU, wantErr)
	}
	for i := range own {
		own[i] = 'X'
	}
	if !reflect.DeepEqual(m, wantM) {
		t.Fatalf("decodeAnswer(%s): the message changed with the body it was read from: %#v", body, m)
	}
}

// BenchmarkDecodeValid: a realistic answer, by the one-pass decoder (which validates
// it too) and by gjson's walk of a body validated before (the reference), in the
// same run.
func BenchmarkDecodeValid(b *testing.B) {
	onepass := func(body []byte) (protocol.Message, protocol.Usage, error) {
		m, u, _, err := decodeAnswer(body)
		return m, u, err
	}
	for _, impl := range []struct {
		name string
		fn   func([]byte) (protocol.Message, protocol.Usage, error)
	}{{"onepass", onepass}, {"gjson", decodeValidGJSON}} {
		b.Run(impl.name, func(b *testing.B) {
			body := []byte(chatCompletion)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := impl.fn(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJSONDecoderWrite: an answer as the proxy hands it over, whole in one write.
func BenchmarkJSONDecoderWrite(b *testing.B) {
	body := []byte(chatCompletion)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var d JSONDecoder
		if _, _ = d.Write(body); !d.Finished() {
			b.Fatal("not finished")
		}
	}
}
