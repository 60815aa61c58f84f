package bedrock

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// fuzzText is spliced by the fuzzers. It starts with a short escape, not a \u one:
// gjson joins a \u escape to a lone surrogate escape that ends the task, and the
// re-parse check would then see different text.
const fuzzText = "\n\nContext: \"é\" <|eot_id|></>\t\u2028"

var fuzzRules = []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}

// checkSplices splices every placement into body and checks each output: one run
// of bytes inserted, valid JSON, and parsed again by parse.
func checkSplices(t *testing.T, r protocol.Request, body []byte, parse func([]byte) (protocol.Request, error)) {
	t.Helper()
	for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.System, protocol.NewMessage} {
		out := r.SpliceTo(nil, body, p, fuzzText)
		if string(out) == string(body) {
			continue
		}
		checkInsertion(t, body, out)
		if !gjson.ValidBytes(out) {
			t.Fatalf("%s: output is not JSON:\n%s", p, out)
		}
		if _, err := parse(out); err != nil {
			t.Fatalf("%s: output does not parse: %v\n%s", p, err, out)
		}
	}
}

// checkTaskAppended fails unless, after AppendToTask, a message of the new view
// holds the task immediately followed by the text.
func checkTaskAppended(t *testing.T, r protocol.Request, body []byte, parse func([]byte) (protocol.Request, error)) {
	t.Helper()
	task := r.Parsed().Task
	if task == "" {
		return
	}
	out := r.SpliceTo(nil, body, protocol.AppendToTask, fuzzText)
	r2, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r2.Parsed().Messages {
		if strings.Contains(m.Content, task+fuzzText) {
			return
		}
	}
	t.Fatalf("no message holds task+text %q\n%s", task+fuzzText, out)
}

// checkEncodes: whatever the blocks, the messages encode (raw blocks are valid
// JSON) and read back.
func checkEncodes(t *testing.T, msgs []protocol.Message) {
	t.Helper()
	line, err := json.Marshal(msgs)
	if err != nil {
		t.Fatalf("messages do not encode: %v", err)
	}
	var back []protocol.Message
	if err := json.Unmarshal(line, &back); err != nil || len(back) != len(msgs) {
		t.Fatalf("messages do not read back: %v\n%s", err, line)
	}
}

func FuzzParseConverse(f *testing.F) {
	for _, b := range []string{
		converseBody, novaBody,
		`{"messages":[]}`,
		`{"system":[],"messages":[{"role":"user","content":[]}]}`,
		`{"system":null,"messages":[{"role":"user","content":[{"text":"Task: a\ud800"}]}]}`,
		`{"messages":[{"role":"assistant","content":[{"toolUse":{"toolUseId":"x","name":"y","input":{"a":[1,{"b":"c"}]}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"x","content":[{"json":{"k": 1}},{"text":"t"}]}},{"text":"\u00e9 Task: go"}]}]}`,
		`{"messages":[{"role":"user","content":[{"text":"Task: see"},{"image":{"format":"png","source":{"bytes":"AA=="}}},{"document":{"format":"md","name":"n","source":{"text":"x"}}},{"cachePoint":{"type":"default"}}]},` +
			`{"role":"assistant","content":[{"reasoningContent":{"reasoningText":{"text":"t","signature":"s"}}},{"toolUse":{"toolUseId":"x","name":"y","input":{}}}]},` +
			`{"role":"user","content":[{"toolResult":{"toolUseId":"x","content":[{"image":{"format":"jpeg","source":{"s3Location":{"uri":"s3://b/k"}}}}]}},{"future":{}}]}]}`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		parse := func(b []byte) (protocol.Request, error) { return Parse(Converse, "m", b, fuzzRules) }
		r, err := parse(body)
		if err != nil {
			return
		}
		checkEncodes(t, r.Parsed().Messages)
		checkSplices(t, r, body, parse)
		checkTaskAppended(t, r, body, parse)
	})
}

// invokeModels are the model ids FuzzParseInvoke picks from.
var invokeModels = []string{
	"us.anthropic.claude-3-5-sonnet-20241022-v2:0",
	"amazon.nova-lite-v1:0",
	"meta.llama3-1-8b-instruct-v1:0",
	"mistral.mistral-7b-instruct-v0:2",
}

func FuzzParseInvoke(f *testing.F) {
	f.Add(uint8(0), []byte(claudeBody))
	f.Add(uint8(0), []byte(`{"anthropic_version":"bedrock-2023-05-31","messages":[{"role":"user","content":[{"type":"text","text":"Task: x"}]}]}`))
	f.Add(uint8(1), []byte(novaBody))
	f.Add(uint8(2), []byte(`{"prompt":"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTask: do \u00e9<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n","max_gen_len":10}`))
	f.Add(uint8(2), []byte(`{"prompt":"\u003c|header_start|\u003euser\u003c|header_end|\u003e\n\nhi\u003c|eot|\u003e"}`))
	f.Add(uint8(2), []byte(`{"prompt":"[INST] Task: name a colour [/INST]"}`))
	f.Add(uint8(3), []byte(`{"prompt":"x"}`))
	f.Fuzz(func(t *testing.T, fam uint8, body []byte) {
		model := invokeModels[int(fam)%len(invokeModels)]
		parse := func(b []byte) (protocol.Request, error) { return Parse(Invoke, model, b, fuzzRules) }
		r, err := parse(body)
		if err != nil {
			return
		}
		checkEncodes(t, r.Parsed().Messages)
		checkSplices(t, r, body, parse)
		l, ok := r.(*LlamaRequest)
		if !ok {
			checkTaskAppended(t, r, body, parse)
			return
		}
		if l.Task != "" {
			// The text lands in the prompt exactly where the task ends (a view of
			// the output would see other blocks: the text holds template tokens,
			// and trailing whitespace is trimmed).
			out := l.SpliceTo(nil, body, protocol.AppendToTask, fuzzText)
			got := gjson.GetBytes(out, "prompt").Str
			if want := l.prompt[:l.taskAt] + fuzzText + l.prompt[l.taskAt:]; got != want {
				t.Fatalf("prompt\n got %q\nwant %q", got, want)
			}
		}
	})
}

// FuzzFrameReader: arbitrary bytes in arbitrary chunks never panic, and every
// decoder assembles the same answer whatever the chunking.
func FuzzFrameReader(f *testing.F) {
	seed := func(chunks []string) []byte {
		var b []byte
		for _, c := range chunks {
			b = append(b, chunk(f, c)...)
		}
		return b
	}
	f.Add(converseStream(f), uint64(1))
	f.Add(seed(claudeChunks), uint64(2))
	f.Add(seed(novaChunks), uint64(3))
	f.Add(seed(llamaChunks), uint64(4))
	f.Add(append(seed(llamaChunks[:1]), exception(f, "internalServerException", "x")...), uint64(5))
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 0}, uint64(6))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		// Frames up to the default bound, and (skipping the longer ones) up to a small one.
		for _, limit := range []int{0, minFrame + int(seed%256)} {
			for _, kind := range []streamKind{streamConverse, streamClaude, streamNova, streamLlama} {
				whole := newStreamDecoder(kind)
				whole.frames.Max = limit
				whole.Write(stream)
				d := newStreamDecoder(kind)
				d.frames.Max = limit
				rng := rand.New(rand.NewPCG(seed, seed>>1))
				for p := stream; len(p) > 0; {
					n := min(1+rng.IntN(33), len(p))
					d.Write(p[:n])
					p = p[n:]
				}
				if !reflect.DeepEqual(d.Message(), whole.Message()) || d.Usage() != whole.Usage() || d.Finished() != whole.Finished() ||
					d.Truncated() != whole.Truncated() {
					t.Fatalf("kind %d, max %d: chunked %#v %+v %v %d, whole %#v %+v %v %d", kind, limit,
						d.Message(), d.Usage(), d.Finished(), d.Truncated(), whole.Message(), whole.Usage(), whole.Finished(), whole.Truncated())
				}
			}
		}
		var fr FrameReader
		fr.Write(stream)
		j := newJSONDecoder(decodeConverseResponse)
		j.Write(stream)
		_, _, _ = j.Message(), j.Usage(), j.Finished()
	})
}

// FuzzStreamPayload: well-framed events (valid CRCs) with arbitrary names and
// payloads, as ConverseStream events and inside chunks, never panic, and a
// decoder's answer does not depend on the chunking.
func FuzzStreamPayload(f *testing.F) {
	f.Add("contentBlockDelta", []byte(`{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\": 1}"}}}`))
	f.Add("contentBlockStart", []byte(`{"contentBlockIndex":9223372036854775807,"start":{"toolUse":{"toolUseId":"x","name":"y"}}}`))
	f.Add("metadata", []byte(`{"usage":{"inputTokens":1e30,"outputTokens":-1}}`))
	f.Add("contentBlockDelta", []byte(`{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"a\u003c","signature":"s","redactedContent":"r"}}}`))
	for _, c := range claudeChunks {
		f.Add("chunk", []byte(c))
	}
	for _, c := range novaChunks {
		f.Add("chunk", []byte(c))
	}
	for _, c := range llamaChunks {
		f.Add("chunk", []byte(c))
	}
	f.Fuzz(func(t *testing.T, name string, payload []byte) {
		if len(name) > 255 {
			return // the frame's header name limit
		}
		stream := append(event(t, name, string(payload)), chunk(t, string(payload))...)
		stream = append(stream, event(t, "messageStop", `{}`)...)
		for _, kind := range []streamKind{streamConverse, streamClaude, streamNova, streamLlama} {
			whole := newStreamDecoder(kind)
			whole.Write(stream)
			d := newStreamDecoder(kind)
			for i := range stream {
				d.Write(stream[i : i+1])
			}
			if !reflect.DeepEqual(d.Message(), whole.Message()) || d.Usage() != whole.Usage() || d.Finished() != whole.Finished() {
				t.Fatalf("kind %d: chunked and whole differ", kind)
			}
			checkEncodes(t, []protocol.Message{whole.Message()})
		}
		for _, dec := range []func([]byte) (protocol.Message, protocol.Usage, bool){decodeConverseResponse, decodeLlamaResponse, decodeClaudeResponse} {
			dec(payload)
		}
	})
}
