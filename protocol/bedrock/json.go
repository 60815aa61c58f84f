package bedrock

import (
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// rootObject validates body and returns it as a gjson value over one copy of the
// body (every string of a view aliases that copy, so the view outlives the caller's
// buffer). A body that is JSON but not an object has no messages.
func rootObject(body []byte) (gjson.Result, error) {
	if err := jsontext.Validate(body); err != nil {
		return gjson.Result{}, err
	}
	js := string(body)
	if jsontext.FirstByte(js) != '{' {
		return gjson.Result{}, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	return gjson.Result{Type: gjson.JSON, Raw: js}, nil
}

// ins is the insertion of text between prefix and suffix at offset at.
func ins(at int, prefix, text, suffix string) jsontext.Insertion {
	return jsontext.Insertion{At: at, Prefix: prefix, Text: text, Suffix: suffix, OK: true}
}
