package bedrock

import (
	"strings"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// chatTemplate is the set of special tokens of one Llama chat template.
type chatTemplate struct {
	start, end, eot string
}

// templates are the Llama chat templates a prompt may use: Llama 3 (3, 3.1, 3.2,
// 3.3) and Llama 4.
var templates = []chatTemplate{
	{start: "<|start_header_id|>", end: "<|end_header_id|>", eot: "<|eot_id|>"},
	{start: "<|header_start|>", end: "<|header_end|>", eot: "<|eot|>"},
}

// llamaBlock is one header block of a templated prompt. Offsets are into the
// decoded prompt.
type llamaBlock struct {
	role             string
	start            int // offset of the header's start token
	textStart, text  int // the block's text, whitespace around it trimmed: [textStart, text)
	eotEnd           int // offset right after the block's end-of-turn token; -1 when it has none
	isMessage, isCue bool
}

// LlamaRequest is a parsed InvokeModel body of a Meta Llama model:
// {"prompt": "…", "max_gen_len", "temperature", "top_p", …}. A prompt in a Llama
// chat template gives one message per header block; any other prompt is one user
// message.
type LlamaRequest struct {
	protocol.View

	op      Op
	bodyLen int
	quoted  string // the prompt's raw JSON string, quotes included
	open    int    // raw offset of its opening quote
	prompt  string // its decoded value

	tmpl   *chatTemplate // nil for a plain prompt
	blocks []llamaBlock

	taskBlock int // index of the block holding the task; -1 for a plain prompt
	taskAt    int // decoded offset right after the task
}

// parseLlama reads a Llama InvokeModel body.
func parseLlama(body []byte, rules []protocol.TaskRule, op Op) (*LlamaRequest, error) {
	root, err := rootObject(body)
	if err != nil {
		return nil, err
	}
	p := jsontext.ObjectKey(root, "prompt")
	if p.Type != gjson.String {
		return nil, protocol.Missing("prompt", "a string")
	}
	r := &LlamaRequest{op: op, bodyLen: len(body), quoted: p.Raw, open: p.Index, prompt: p.Str, taskBlock: -1}
	r.Stream = op.Stream()
	r.readPrompt()
	r.findTask(rules, body)
	return r, nil
}

// readPrompt splits the prompt into header blocks when it uses a chat template.
func (r *LlamaRequest) readPrompt() {
	s := r.prompt
	for i := range templates {
		if strings.Contains(s, templates[i].start) {
			r.tmpl = &templates[i]
			break
		}
	}
	if r.tmpl == nil {
		r.Messages = []protocol.Message{{Role: "user", Content: s}}
		return
	}
	t := r.tmpl
	at := strings.Index(s, t.start)
	for at >= 0 {
		nameAt := at + len(t.start)
		e := strings.Index(s[nameAt:], t.end)
		if e < 0 {
			break // a header without its end token is no block
		}
		if n := strings.Index(s[nameAt:nameAt+e], t.start); n >= 0 {
			at = nameAt + n // a header cut short by the next one is no block
			continue
		}
		b := llamaBlock{role: strings.TrimSpace(s[nameAt : nameAt+e]), start: at, eotEnd: -1}
		body := nameAt + e + len(t.end)
		next := strings.Index(s[body:], t.start)
		stop := len(s)
		if next >= 0 {
			next += body
			stop = next
		}
		if eot := strings.Index(s[body:stop], t.eot); eot >= 0 {
			stop = body + eot
			b.eotEnd = stop + len(t.eot)
		}
		b.textStart, b.text = trimSpan(s, body, stop)
		// The open block that ends the prompt with nothing in it is the cue for the
		// model to answer, not a message.
		b.isCue = b.eotEnd < 0 && next < 0 && b.textStart == b.text
		b.isMessage = !b.isCue
		if b.role == "ipython" {
			b.role = "tool" // Llama 3.1's role for tool output
		}
		r.blocks = append(r.blocks, b)
		if b.isMessage {
			r.Messages = append(r.Messages, protocol.Message{Role: b.role, Content: s[b.textStart:b.text]})
		}
		at = next
	}
	if len(r.blocks) == 0 {
		// No complete header: the prompt is plain text after all.
		r.tmpl = nil
		r.Messages = []protocol.Message{{Role: "user", Content: s}}
	}
}

// trimSpan returns [from, to) of s with the whitespace at both ends cut off.
func trimSpan(s string, from, to int) (int, int) {
	t := strings.TrimLeftFunc(s[from:to], unicode.IsSpace)
	from = to - len(t)
	return from, from + len(strings.TrimRightFunc(t, unicode.IsSpace))
}

// findTask applies rules in order (protocol.FindTask) to the texts of system and
// user blocks (or to the whole plain prompt); the first that matches sets r.Task.
func (r *LlamaRequest) findTask(rules []protocol.TaskRule, body []byte) {
	if r.tmpl == nil {
		segs := []protocol.Segment{{Msg: 0, Role: "user", Text: r.prompt, Offset: r.open}}
		if f, ok := protocol.FindTask(rules, body, segs); ok {
			r.Task, r.TaskRule, r.taskAt = f.Task, f.Rule, f.End
		}
		return
	}
	var segs []protocol.Segment
	var blockOf []int // the block index of each segment
	turn := 0
	for i, b := range r.blocks {
		if !b.isMessage {
			continue
		}
		if b.role == "assistant" {
			turn++
		}
		if b.role != "user" && b.role != "system" {
			continue
		}
		segs = append(segs, protocol.Segment{Msg: i, Role: b.role, Text: r.prompt[b.textStart:b.text], Turn: turn, Offset: -1})
		blockOf = append(blockOf, i)
	}
	f, ok := protocol.FindTask(rules, body, segs)
	if !ok {
		return
	}
	i := blockOf[f.Seg]
	r.Task, r.TaskRule, r.taskAt, r.taskBlock = f.Task, f.Rule, r.blocks[i].textStart+f.End, i
}

// Parsed returns the call's view.
func (r *LlamaRequest) Parsed() *protocol.View { return &r.View }

// raw maps an offset of the decoded prompt to its offset in the body.
func (r *LlamaRequest) raw(decoded int) int {
	return r.open + jsontext.QuotedOffset(r.quoted, decoded)
}

// SpliceTo appends to dst body with text inserted into the prompt per placement
// and returns the extended slice; body is not modified.
//
//   - AppendToTask inserts text right after the task (before the end-of-turn token
//     of its block).
//   - System appends text to the text of the first system block, or inserts a
//     system block in front of the first block when there is none; a plain prompt
//     gets the text and a blank line in front.
//   - NewMessage inserts a user block holding the text after the task's block; a
//     plain prompt gets a blank line and the text at its end (before a closing
//     "[/INST]").
//
// Except for AppendToTask and an existing system block's text, the text has its
// leading whitespace trimmed. With no task, AppendToTask and NewMessage append body
// unchanged, as do a body other than the one parsed, an unknown placement, an empty
// text and a task block without an end-of-turn token for NewMessage.
func (r *LlamaRequest) SpliceTo(dst, body []byte, p protocol.Placement, text string) []byte {
	return r.insertion(body, p, text).AppendTo(dst, body)
}

// insertion resolves a splice.
func (r *LlamaRequest) insertion(body []byte, p protocol.Placement, text string) jsontext.Insertion {
	if len(body) != r.bodyLen || text == "" {
		return jsontext.Insertion{}
	}
	trimmed := strings.TrimLeftFunc(text, unicode.IsSpace)
	if p != protocol.AppendToTask && trimmed == "" {
		return jsontext.Insertion{}
	}
	switch p {
	case protocol.AppendToTask:
		if r.Task == "" {
			return jsontext.Insertion{}
		}
		return ins(r.raw(r.taskAt), "", text, "")
	case protocol.System:
		return r.spliceSystem(text, trimmed)
	case protocol.NewMessage:
		if r.Task == "" {
			return jsontext.Insertion{}
		}
		if r.tmpl == nil {
			at := len(r.prompt)
			if t := strings.TrimRightFunc(r.prompt, unicode.IsSpace); strings.HasSuffix(t, "[/INST]") {
				at = len(t) - len("[/INST]")
			}
			return ins(r.raw(at), "", "\n\n"+trimmed, "")
		}
		b := r.blocks[r.taskBlock]
		if b.eotEnd < 0 {
			return jsontext.Insertion{}
		}
		return ins(r.raw(b.eotEnd), r.header("user"), trimmed, r.tmpl.eot)
	}
	return jsontext.Insertion{}
}

// spliceSystem splices for the System placement.
func (r *LlamaRequest) spliceSystem(text, trimmed string) jsontext.Insertion {
	if r.tmpl == nil {
		return ins(r.raw(0), "", trimmed+"\n\n", "")
	}
	for _, b := range r.blocks {
		if b.role == "system" && b.isMessage {
			if b.textStart == b.text {
				text = trimmed // nothing to separate the text from
			}
			return ins(r.raw(b.text), "", text, "")
		}
	}
	return ins(r.raw(r.blocks[0].start), r.header("system"), trimmed, r.tmpl.eot)
}

// header is the raw JSON text that opens a block of role: the header tokens and the
// blank line the template puts after them.
func (r *LlamaRequest) header(role string) string {
	return r.tmpl.start + role + r.tmpl.end + `\n\n`
}

// Decoder returns a decoder for the answer: an event stream of generation chunks
// for InvokeModelWithResponseStream, else a JSON body.
func (r *LlamaRequest) Decoder() protocol.Decoder {
	if r.op == InvokeStream {
		return newStreamDecoder(streamLlama)
	}
	return newJSONDecoder(decodeLlamaResponse)
}
