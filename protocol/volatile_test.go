package protocol

import (
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestStable(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// Dates.
		{"Today's date is 2026-11-24.", "Today's date is <date>"},
		{"<current_date>2026-11-24</current_date>", "<current_date><date></current_date>"},
		{"at 2025-10-20T10:00:00Z ok", "at <date> ok"},
		{"at 2025-10-20T10:00:00.123+02:00.", "at <date>."},
		{"at 2025-10-20 10:00 then", "at <date> then"},
		{"on 2025/1/2 and 20.10.2025 and 10-20-2025", "on <date> and <date> and <date>"},
		{"Date: Mon, 20 Oct 2025 10:00:00 GMT\n", "Date: <date>\n"},
		{"due 20 Oct 2025.", "due <date>."},
		{"Monday, October 20, 2025 is a day", "<date> is a day"},
		{"from Oct 2nd, 2025 on", "from <date> on"},
		{"today's date: 24 November\nnext", "today's date: <date>\nnext"},
		{"Current date: whatever it is", "Current date: <date>"},
		// Times.
		{"meet at 10:30 AM", "meet at <time>"},
		{"ran 23:59:59.5 UTC", "ran <time>"},
		// Paths.
		{"<cwd>/tmp/TestX123/001/repo</cwd>", "<cwd><path></cwd>"},
		{"Contents of /home/al/proj/CLAUDE.md (project)", "Contents of <path> (project)"},
		{"see /etc/hosts.", "see <path>."},
		{"memory at `~/.claude/memory`", "memory at `<path>`"},
		{`open C:\Users\al\repo\main.go now`, "open <path> now"},
		// Ids.
		{"session fa511ccb-cbf7-4445-aa5f-bd8434a64f50 done", "session <id> done"},
		{"commit 4099d6e7 and 4099d6e7c0ffee", "commit <id> and <id>"},
		{"key toolu_01A09q90qw90lq917835lq9 x", "key <id> x"},
		{"cc_version=2.1.197.6e2;", "cc_version=2.1.197.6e2;"},
		// Kept: what tells two tasks apart.
		{"List the files in this repository.", "List the files in this repository."},
		{"fix main.go:10:20 and src/app/x.go", "fix main.go:10:20 and src/app/x.go"},
		{"see https://example.com/a/b/c and and/or /review", "see https://example.com/a/b/c and and/or /review"},
		{"book flight 12345678 for 3 people on May 5", "book flight 12345678 for 3 people on May 5"},
		{"test_user_registration_flow_v2 deadbeef", "test_user_registration_flow_v2 deadbeef"},
		{"version 1.2.3 at 192.168.1.1", "version 1.2.3 at 192.168.1.1"},
		{"", ""},
		{"due in 30 ", "due in 30 "}, // a day's number ending the text, then no month
	} {
		if got := Stable(tt.in); got != tt.want {
			t.Errorf("Stable(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestStableSameRequest: the same request on another day, in another folder, in
// another session is one text; two requests stay two.
func TestStableSameRequest(t *testing.T) {
	a := "In /tmp/TestCaptureHarness1/001/repo on 2026-11-24 (session 77f2581b-dfde-45fc-9d96-61403ca4fceb): list the files."
	b := "In /home/bob/work/repo on 2026-11-23 (session fa511ccb-cbf7-4445-aa5f-bd8434a64f50): list the files."
	c := "In /home/bob/work/repo on 2026-11-23 (session fa511ccb-cbf7-4445-aa5f-bd8434a64f50): delete the files."
	if Stable(a) != Stable(b) {
		t.Errorf("one request, two texts:\n%q\n%q", Stable(a), Stable(b))
	}
	if Stable(b) == Stable(c) {
		t.Errorf("two requests, one text: %q", Stable(c))
	}
}

func TestStableNoCopy(t *testing.T) {
	s := strings.Repeat("plain words only ", 100)
	if got := Stable(s); got != s {
		t.Fatal("changed a text with nothing volatile")
	}
	if n := testing.AllocsPerRun(100, func() { Stable(s) }); n != 0 {
		t.Errorf("Stable allocates %v times for a text with nothing volatile", n)
	}
}

func FuzzStable(f *testing.F) {
	for _, s := range []string{"Today's date is 2026-11-24.", "/a/b 10:00 fa511ccb-cbf7-4445-aa5f-bd8434a64f50",
		"Mon, 20 Oct 2025 10:00:00 GMT", `C:\a\b`, "~/x", "October 2, 2025", "\xff/a/b", "2025-1", "Mon, "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Stable(s)
		if again := Stable(s); again != got {
			t.Fatalf("Stable(%q) is not deterministic: %q then %q", s, got, again)
		}
		if len(got) > len(s)+len(s)*len(VolatileDate) {
			t.Fatalf("Stable(%q) = %q grew beyond its placeholders", s, got)
		}
		if !strings.ContainsAny(s, "0123456789/~\\") && !strings.Contains(strings.ToLower(s), "date") && got != s {
			t.Fatalf("Stable(%q) = %q changed a text with no digit, path or date phrase", s, got)
		}
	})
}

// FuzzStablePlainWords: passing over plain words without asking wordVolatile
// changes nothing Stable returns.
func FuzzStablePlainWords(f *testing.F) {
	for _, s := range []string{"Today's date is 2026-11-24.", "/a/b 10:00 fa511ccb-cbf7-4445-aa5f-bd8434a64f50",
		"Mon, 20 Oct 2025 10:00:00 GMT", `C:\a\b`, "~/x", "October 2, 2025", "deadbeef-dead-beef-dead-beefdeadbeef",
		"session-abcdefgh-1234-5678-ijkl", "the current date is Friday", "THE CURRENT DATE: now", "abc_def-ghi_1234_5678xyzw",
		"c:\\x", "Sept 3rd, 2024", "a-b-c d:e", "cafe1234 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Stable(s), stable(s, false); got != want {
			t.Fatalf("Stable(%q) = %q, want %q", s, got, want)
		}
	})
}

// BenchmarkStableTauSystem is Stable over tau-bench's airline system prompt: the
// text every new episode's first call canonicalises for stitching.
func BenchmarkStableTauSystem(b *testing.B) {
	raw, err := os.ReadFile("../../shared/data/tau-bench/gpt-4o-airline.json")
	if err != nil {
		b.Skipf("tau-bench data: %v", err)
	}
	sys := gjson.GetBytes(raw, "0.traj.0.content").Str
	if sys == "" {
		b.Fatal("no system prompt in the first trajectory")
	}
	b.SetBytes(int64(len(sys)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Stable(sys)
	}
}

// wordVolatileRef is wordVolatile as it was, every check tried at every word: the
// reference the fast path must agree with.
//
// It tells the length of the volatile part that starts at the word start
// s[i], and its replacement; 0 when there is none.
func wordVolatileRef(s string, i int) (int, string) {
	if n := uuidAt(s, i); n > 0 {
		return n, VolatileID
	}
	c := s[i]
	if isDigitByte(c) {
		if n := dateAt(s, i); n > 0 {
			return n, VolatileDate
		}
		if i == 0 || s[i-1] != ':' && s[i-1] != '.' {
			if n := timeAt(s, i); n > 0 {
				return n, VolatileTime
			}
		}
	}
	if isLetterByte(c) {
		if n := windowsPathAt(s, i); n > 0 {
			return n, VolatilePath
		}
		if n := namedDateAt(s, i); n > 0 {
			return n, VolatileDate
		}
		if n, keep := datePhraseAtRef(s, i); n > 0 {
			return n, s[i:i+keep] + " " + VolatileDate
		}
	}
	if n := tokenAt(s, i); n > 0 {
		return n, VolatileID
	}
	if n := hexAt(s, i); n > 0 {
		return n, VolatileID
	}
	return 0, ""
}

// FuzzWordVolatile: the fast path finds what every check at every word found, at
// every word start of any text.
func FuzzWordVolatile(f *testing.F) {
	for _, s := range []string{"Today's date is 2026-11-24.", "the current date is now\n", "Current date: x",
		"session fa511ccb-cbf7-4445-aa5f-bd8434a64f50 done", "commit 4099d6e7 and 4099d6e7c0ffee",
		"key toolu_01A09q90qw90lq917835lq9 x", "Monday, October 20, 2025", "Mon, 20 Oct 2025 10:00:00 GMT",
		`C:\Users\al`, "10:30 AM", "deadbeef-0000", "abcdef0123456789abcd-x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := range len(s) {
			if !isWordByte(s[i]) {
				continue
			}
			n, ph := wordVolatile(s, i)
			rn, rph := wordVolatileRef(s, i)
			if n != rn || ph != rph {
				t.Fatalf("%q at %d: %d %q, reference %d %q", s, i, n, ph, rn, rph)
			}
		}
	})
}

// datePhraseAtRef is datePhraseAt as it was. It returns the length of a date phrase at s[i:] and the rest of its
// line, and the length of the phrase (which is kept); 0 when there is none.
func datePhraseAtRef(s string, i int) (n, keep int) {
	c := s[i] | 0x20
	if c != 't' && c != 'c' {
		return 0, 0
	}
	for _, p := range datePhrases {
		if len(s)-i < len(p) || !strings.EqualFold(s[i:i+len(p)], p) {
			continue
		}
		end := strings.IndexByte(s[i+len(p):], '\n')
		if end < 0 {
			end = len(s) - i - len(p)
		}
		if strings.TrimSpace(s[i+len(p):i+len(p)+end]) == "" {
			return 0, 0 // nothing to replace
		}
		return len(p) + end, len(p)
	}
	return 0, 0
}
