package bedrock

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol/jsontext"
)

// rootObject validates body (jsontext.Object) and returns it as a gjson value over
// one copy of the body (every string of a view aliases that copy, so the view
// outlives the caller's buffer).
func rootObject(body []byte) (gjson.Result, error) {
	if _, _, err := jsontext.Object(body, nil); err != nil {
		return gjson.Result{}, err
	}
	return gjson.Result{Type: gjson.JSON, Raw: string(body)}, nil
}

// ins is the insertion of text between prefix and suffix at offset at.
func ins(at int, prefix, text, suffix string) jsontext.Insertion {
	return jsontext.Insertion{At: at, Prefix: prefix, Text: text, Suffix: suffix, OK: true}
}
