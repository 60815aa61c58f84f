package jsontext

import "testing"

func TestSplice(t *testing.T) {
	body := []byte(`{"a":"xy"}`)
	member := Wrap{Prefix: `"s":"`, Suffix: `",`, Trim: true}
	tests := []struct {
		name    string
		body    []byte
		bodyLen int
		at      int
		ok      bool
		w       Wrap
		text    string
		want    string
		same    bool // the very input slice comes back
	}{
		{"inside a string keeps leading space", body, 10, 7, true, Wrap{}, "\n ctx", `{"a":"x\n ctxy"}`, false},
		{"a new member trims", body, 10, 1, true, member, "\n\n ctx", `{"s":"ctx","a":"xy"}`, false},
		{"no anchor", body, 10, 1, false, member, "ctx", `{"a":"xy"}`, true},
		{"another body", body, 11, 1, true, member, "ctx", `{"a":"xy"}`, true},
		{"offset past the end", body, 10, 11, true, member, "ctx", `{"a":"xy"}`, true},
		{"empty text", body, 10, 7, true, Wrap{}, "", `{"a":"xy"}`, true},
		{"only blank once trimmed", body, 10, 1, true, member, " \n\t", `{"a":"xy"}`, true},
		{"blank kept inside a string", body, 10, 7, true, Wrap{}, " ", `{"a":"x y"}`, false},
	}
	for _, tt := range tests {
		got := Splice(tt.body, tt.bodyLen, tt.at, tt.ok, tt.w, tt.text)
		if string(got) != tt.want {
			t.Errorf("%s: got %s; want %s", tt.name, got, tt.want)
		}
		if same := len(got) > 0 && &got[0] == &tt.body[0]; same != tt.same {
			t.Errorf("%s: returned the input slice %v; want %v", tt.name, same, tt.same)
		}
		if string(body) != `{"a":"xy"}` {
			t.Fatalf("%s: Splice modified its input: %s", tt.name, body)
		}
	}
}

func TestObjectBounds(t *testing.T) {
	tests := []struct {
		js            string
		open, closing int
	}{
		{`{}`, 0, 1},
		{" \n{\"a\":{}} \t", 2, 9},
		{`[{}]`, -1, -1},
		{`"{}"`, -1, -1},
		{``, -1, -1},
	}
	for _, tt := range tests {
		open, closing := ObjectBounds(tt.js)
		if open != tt.open || closing != tt.closing {
			t.Errorf("ObjectBounds(%q) = %d, %d; want %d, %d", tt.js, open, closing, tt.open, tt.closing)
		}
	}
}
