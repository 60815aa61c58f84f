package jsontext

import "testing"

// TestSpliced: the insertion an anchor makes, and when it makes none.
func TestSpliced(t *testing.T) {
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
		same    bool // nothing is inserted
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
		in := Spliced(tt.body, tt.bodyLen, Anchor{At: tt.at, Wrap: tt.w}, tt.ok, tt.text)
		got := in.AppendTo(nil, tt.body)
		if string(got) != tt.want {
			t.Errorf("%s: got %s; want %s", tt.name, got, tt.want)
		}
		if same := !in.OK; same != tt.same {
			t.Errorf("%s: inserted nothing %v; want %v", tt.name, same, tt.same)
		}
		if string(body) != `{"a":"xy"}` {
			t.Fatalf("%s: AppendTo modified its input: %s", tt.name, body)
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
