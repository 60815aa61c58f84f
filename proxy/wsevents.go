package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The Responses API's WebSocket mode as camproxy reads it: the client events a socket
// carries (a response.create per turn, response.cancel and others), the POST body a
// response.create becomes, the items a session keeps so that a continuation reaches a
// stateless upstream whole, and the error event in the shape OpenAI's WebSocket mode
// sends ({"type":"error","status":…,"error":{…}}, the shape Codex and the SDKs read).

// Client event types camproxy acts on; any other passes through (or, without an
// upstream socket, is answered with an error event).
const (
	evCreate = "response.create"
	evCancel = "response.cancel"
)

// parseClientEvent reads a client message's type. A message that is not a JSON object
// with a string "type" is refused: nothing can be done with it, and the client is told.
func parseClientEvent(msg []byte) (string, *Error) {
	if !gjson.ValidBytes(msg) {
		return "", wsBadRequest("invalid_json", "", "the message is not valid JSON")
	}
	root := gjson.ParseBytes(msg)
	if !root.IsObject() {
		return "", wsBadRequest("invalid_event", "", "the message is not a JSON object")
	}
	t := root.Get("type")
	if t.Type != gjson.String || t.Str == "" {
		return "", wsBadRequest("invalid_event", "type", "the message has no string \"type\"")
	}
	return t.Str, nil
}

// wsError is an *Error with the code and param OpenAI's error object carries, which
// the WebSocket error event reports (previous_response_not_found is told by its code).
type wsError struct{ code, param string }

func wsBadRequest(code, param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Msg: msg,
		Err: &wsError{code: code, param: param}}
}

func (e *wsError) Error() string { return e.code }

// wsErrorEvent renders e as the WebSocket error event.
func wsErrorEvent(e *Error) []byte {
	var code, param string
	for err := error(e); err != nil; {
		if we, ok := err.(*wsError); ok {
			code, param = we.code, we.param
			break
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			break
		}
		err = u.Unwrap()
	}
	msg := e.Msg
	if code == "" && e.Err != nil {
		msg = e.Error()
	}
	obj, _ := sjson.SetBytes([]byte(`{"type":"","code":null,"message":"","param":null}`), "type", e.Type)
	obj, _ = sjson.SetBytes(obj, "message", msg)
	if code != "" {
		obj, _ = sjson.SetBytes(obj, "code", code)
	}
	if param != "" {
		obj, _ = sjson.SetBytes(obj, "param", param)
	}
	return wrapErrorEvent(e.Status, obj)
}

// wrapErrorEvent is the error event of status whose error object is obj (raw JSON).
func wrapErrorEvent(status int, obj []byte) []byte {
	ev := []byte(`{"type":"error","status":` + strconv.Itoa(status) + `,"error":`)
	ev = append(ev, obj...)
	return append(ev, '}')
}

// maxQuotedError bounds how much of a non-JSON error body an error event quotes.
const maxQuotedError = 4 << 10

// answerErrorEvent is the error event of a failed turn's answer: status and the JSON
// body camproxy or the upstream sent. An OpenAI error object is carried as it is; any
// other body is quoted (cut at maxQuotedError) as the message.
func answerErrorEvent(status int, body []byte) []byte {
	if obj := gjson.GetBytes(body, "error"); obj.IsObject() {
		return wrapErrorEvent(status, []byte(obj.Raw))
	}
	if len(body) > maxQuotedError {
		body = body[:maxQuotedError]
	}
	msg := "upstream answered " + strconv.Itoa(status) + " " + http.StatusText(status)
	if len(body) > 0 {
		msg += ": " + string(body)
	}
	typ := "upstream_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	obj, _ := sjson.SetBytes([]byte(`{"type":"","code":null,"message":"","param":null}`), "type", typ)
	obj, _ = sjson.SetBytes(obj, "message", msg)
	return wrapErrorEvent(status, obj)
}

// wsItems is what a session keeps of its responses so that a continuation
// (previous_response_id and only the new items) can be sent whole to an upstream
// that keeps no state: each completed response's id, the response it continued, the
// input items its turn added and its output items. A chain is walked to expand a
// continuation. The total is bounded by server.max_body_bytes: past it the oldest
// responses are forgotten (a continuation of one is told previous_response_not_found,
// and the client sends its whole input, as OpenAI's WebSocket mode defines).
type wsItems struct {
	max   int
	total int
	byID  map[string]*wsResponse
	order []string // ids, oldest first
}

type wsResponse struct {
	prev  string
	items [][]byte // the turn's own input items, then the response's output items
	size  int
}

// chain appends to dst the items of every response from the first up to id, in
// conversation order; ok is false when id (or one before it) is not known.
func (w *wsItems) chain(dst [][]byte, id string) ([][]byte, bool) {
	var path []*wsResponse
	for id != "" {
		r, ok := w.byID[id]
		if !ok {
			return dst, false
		}
		path = append(path, r)
		id = r.prev
	}
	for i := len(path) - 1; i >= 0; i-- {
		dst = append(dst, path[i].items...)
	}
	return dst, true
}

// add keeps a completed response.
func (w *wsItems) add(id, prev string, input, output [][]byte) {
	if id == "" || w.byID[id] != nil {
		return
	}
	if w.byID == nil {
		w.byID = map[string]*wsResponse{}
	}
	r := &wsResponse{prev: prev, items: append(append(make([][]byte, 0, len(input)+len(output)), input...), output...)}
	for _, it := range r.items {
		r.size += len(it)
	}
	w.byID[id] = r
	w.order = append(w.order, id)
	w.total += r.size
	for w.max > 0 && w.total > w.max && len(w.order) > 1 {
		old := w.order[0]
		w.order = w.order[1:]
		w.total -= w.byID[old].size
		delete(w.byID, old)
	}
}

// inputItems are a create event's input as items: a string input is one user message.
func inputItems(input gjson.Result) [][]byte {
	switch {
	case input.Type == gjson.String:
		msg, _ := sjson.SetBytes([]byte(`{"role":"user","content":""}`), "content", input.Str)
		return [][]byte{msg}
	case input.IsArray():
		var items [][]byte
		input.ForEach(func(_, it gjson.Result) bool {
			items = append(items, []byte(it.Raw))
			return true
		})
		return items
	}
	return nil
}

// joinItems is a JSON array of items.
func joinItems(items [][]byte) []byte {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

// createTurn is a response.create made ready for the pipeline.
type createTurn struct {
	body  []byte   // the POST /v1/responses body
	prev  string   // the previous_response_id the client sent ("" for none)
	input [][]byte // the items this turn adds to the conversation
	// warmup: "generate": false, a request that prepares state and generates nothing.
	warmup bool
	model  string
}

// createBody turns a response.create event into the body of POST /v1/responses with
// "stream": true, at the byte level (every other field as the client sent it). When
// the upstream keeps no state (expand), a continuation's previous_response_id is
// replaced by the whole conversation from w, and stream_id (a WebSocket-only field)
// is dropped. A body past maxBody is refused as an HTTP body of that size would be.
// localResponsePrefix starts the ids of the responses camproxy answers itself
// (wsSession.warmup); no upstream knows them.
const localResponsePrefix = "resp_cam_"

// isWarmup says whether a response.create asks for no generation ("generate": false).
func isWarmup(msg []byte) bool { return gjson.GetBytes(msg, "generate").Type == gjson.False }

func createBody(msg []byte, w *wsItems, expand bool, maxBody int) (createTurn, *Error) {
	var t createTurn
	root := gjson.ParseBytes(msg)
	if p := root.Get("previous_response_id"); p.Type == gjson.String {
		t.prev = p.Str
	}
	t.input = inputItems(root.Get("input"))
	t.warmup = isWarmup(msg)
	t.model = root.Get("model").Str
	// Every field rewritten is deleted wherever it appears: a repeated key read one
	// way here and another upstream (the first, or the last) would be a differential.
	body, err := deleteAll(msg, "type")
	if err == nil {
		body, err = deleteAll(body, "stream")
	}
	if err == nil {
		body, err = sjson.SetBytes(body, "stream", true)
	}
	if err != nil {
		return t, wsBadRequest("invalid_event", "", "the response.create event cannot be read: "+err.Error())
	}
	if expand {
		body, _ = deleteAll(body, "stream_id")
	}
	// Over HTTP every continuation is expanded; over the upstream's socket only one of a
	// response camproxy answered itself (a warm-up), which the upstream never saw.
	if t.prev != "" && (expand || strings.HasPrefix(t.prev, localResponsePrefix)) {
		whole, ok := w.chain(nil, t.prev)
		if !ok {
			return t, wsBadRequest("previous_response_not_found", "previous_response_id",
				"Previous response with id '"+t.prev+"' not found.")
		}
		whole = append(whole, t.input...)
		body, _ = deleteAll(body, "previous_response_id")
		body, _ = deleteAll(body, "input")
		body, err = sjson.SetRawBytes(body, "input", joinItems(whole))
		if err != nil {
			return t, wsBadRequest("invalid_event", "input", "the response.create event's input cannot be expanded: "+err.Error())
		}
	}
	if maxBody > 0 && len(body) > maxBody {
		return t, &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Msg: "the turn's request (its whole conversation) is larger than server.max_body_bytes (" + strconv.Itoa(maxBody) + " bytes)"}
	}
	t.body = body
	return t, nil
}

// deleteAll deletes every top-level key of body (sjson deletes the first only).
func deleteAll(body []byte, key string) ([]byte, error) {
	for gjson.GetBytes(body, key).Exists() {
		var err error
		if body, err = sjson.DeleteBytes(body, key); err != nil {
			return body, err
		}
	}
	return body, nil
}
