package protocol

import "strings"

// Placeholders that stand for a volatile part in Stable's output.
const (
	VolatileDate = "<date>"
	VolatileTime = "<time>"
	VolatilePath = "<path>"
	VolatileID   = "<id>"
)

// Stable returns text with its volatile parts — what changes from one run of the same
// request to the next: the day, the folder, the session — replaced by placeholders,
// so that a hash of it names the request rather than the run. It is what the task id
// hashes and what stitching hashes of system, developer and user texts. Replaced:
//
//   - dates: ISO 8601 (2025-10-20, 2025/10/20, 2025.10.20, with a time after "T" or
//     a space), day-month-year and month-day-year with a 4-digit year (20/10/2025,
//     10-20-2025, 20.10.2025), RFC 1123 ("Mon, 20 Oct 2025 10:00:00 GMT"), "20 Oct
//     2025", "October 20, 2025" and "Monday, October 20, 2025" → <date>;
//   - the rest of the line after "Today's date is", "Today's date:", "Current date:"
//     and "The current date is" (any case) → <date>;
//   - times H:MM, H:MM:SS and H:MM:SS.fff with an optional AM/PM and zone (Z, UTC,
//     GMT, ±HH:MM) → <time>, unless right after ':' or '.' (file:line:col stays);
//   - absolute paths: two or more /segments at the start of a word (a URL's path is
//     not one: it follows its host), ~/… and C:\… → <path>;
//   - UUIDs; hex runs of 8 or more with a digit and a letter (hashes, commit ids);
//     runs of 20 or more of A-Z a-z 0-9 _ - with at least 4 digits and 4 letters
//     (session ids, keys, tool-call ids) → <id>.
//
// Numbers, relative paths, URLs and words are kept: two requests that differ in them
// are two tasks. The text is returned as is (no copy) when nothing is volatile.
//
// No volatile part spans a line end or is recognised by reading past one: Stable of a
// text is Stable of its lines ('\n' kept) concatenated, which package episode's memo
// relies on to scan only the lines of a long text it has not seen.
func Stable(text string) string { return stable(text, true) }

// stable is Stable; without plain it asks wordVolatile at every word, as Stable did
// before plainWordAt (its tests' reference).
func stable(text string, plain bool) string {
	var out []byte // nil until the first replacement
	last := 0      // text[last:i] is not copied yet
	emit := func(i, n int, ph string) {
		if out == nil {
			out = make([]byte, 0, len(text))
		}
		out = append(append(out, text[last:i]...), ph...)
		last = i + n
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case isWordByte(c):
			if plain {
				if j, ok := plainWordAt(text, i); ok {
					i = j
					continue
				}
			}
			if n, ph := wordVolatile(text, i); n > 0 {
				emit(i, n, ph)
				i += n
				continue
			}
			for i < len(text) && isWordByte(text[i]) {
				i++
			}
		case c == '/' || c == '~':
			if n := pathAt(text, i); n > 0 {
				emit(i, n, VolatilePath)
				i += n
				continue
			}
			i++
		default:
			i++
		}
	}
	if out == nil {
		return text
	}
	return string(append(out, text[last:]...))
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isDigitByte(c byte) bool { return c >= '0' && c <= '9' }

func isHexByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isLetterByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// plainWordAt reports whether no volatile part starts at the word start s[i], for
// most words of a text, in one pass over the word (wordVolatile tries each kind in
// turn, several of them scanning the word again); j is the word's end. A word with
// no digit, not followed by '-' or ':', can start only a named date (a weekday or
// month name) or a date phrase: no id (a UUID's first group ends at '-', a token or
// hex id needs digits, and neither can reach past the word but by '-'), no numeric
// date or time, no Windows path (its drive letter is followed by ':'). Anything
// else is left to wordVolatile.
func plainWordAt(s string, i int) (j int, plain bool) {
	j = i
	for j < len(s) && isWordByte(s[j]) {
		if isDigitByte(s[j]) {
			return j, false
		}
		j++
	}
	if j < len(s) && (s[j] == '-' || s[j] == ':') {
		return j, false
	}
	c := s[i]
	if c >= 'A' && c <= 'Z' && (nameAt(s, i, dayNames) > 0 || monthAt(s, i) > 0) {
		return j, false
	}
	if lc := c | 0x20; lc == 't' || lc == 'c' {
		if n, _ := datePhraseAt(s, i); n > 0 {
			return j, false
		}
	}
	return j, true
}

// wordVolatile tells the length of the volatile part that starts at the word start
// s[i], and its replacement; 0 when there is none. Most words are too short for a
// UUID, a hex id or a token and start with no letter that a date or a date phrase
// starts with: those are passed over after reading at most 20 bytes, since running
// every check at every word of a long prompt was most of Stable's time.
func wordVolatile(s string, i int) (int, string) {
	// The hex digits at the word's start, up to the 8 that a UUID and a hex id need.
	h := i
	for h < len(s) && h-i < 8 && isHexByte(s[h]) {
		h++
	}
	hex8 := h-i == 8
	if hex8 {
		if n := uuidAt(s, i); n > 0 {
			return n, VolatileID
		}
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
		if c <= 'Z' { // every month and day name is capitalised
			if n := namedDateAt(s, i); n > 0 {
				return n, VolatileDate
			}
		}
		if c|0x20 == 't' || c|0x20 == 'c' {
			if n, keep := datePhraseAt(s, i); n > 0 {
				return n, s[i:i+keep] + " " + VolatileDate
			}
		}
	}
	// A token needs 20 bytes of its alphabet.
	t := i
	for t < len(s) && t-i < 20 && tokenByte(s[t]) {
		t++
	}
	if t-i == 20 {
		if n := tokenAt(s, i); n > 0 {
			return n, VolatileID
		}
	}
	if hex8 {
		if n := hexAt(s, i); n > 0 {
			return n, VolatileID
		}
	}
	return 0, ""
}

// tokenByte reports whether c may be part of a token (tokenAt).
func tokenByte(c byte) bool { return isWordByte(c) || c == '-' }

// digits returns the end of the run of at most max digits at s[i:] and its value.
func digits(s string, i, max int) (int, int) {
	v, j := 0, i
	for j < len(s) && j-i < max && isDigitByte(s[j]) {
		v = v*10 + int(s[j]-'0')
		j++
	}
	return j, v
}

// uuidAt is the length of the UUID (8-4-4-4-12 hex digits) at s[i:], or 0.
func uuidAt(s string, i int) int {
	j := i
	for g, n := range [5]int{8, 4, 4, 4, 12} {
		if g > 0 {
			if j >= len(s) || s[j] != '-' {
				return 0
			}
			j++
		}
		for k := 0; k < n; k++ {
			if j >= len(s) || !isHexByte(s[j]) {
				return 0
			}
			j++
		}
	}
	if j < len(s) && (isWordByte(s[j]) || s[j] == '-') {
		return 0
	}
	return j - i
}

// dateAt is the length of a numeric date at s[i:] (and a time after it), or 0.
func dateAt(s string, i int) int {
	j, _ := digits(s, i, 4)
	if j-i == 4 && j < len(s) && (s[j] == '-' || s[j] == '/' || s[j] == '.') {
		// Year first: 2025-10-20.
		sep := s[j]
		k, m := digits(s, j+1, 2)
		if k == j+1 || m < 1 || m > 12 || k >= len(s) || s[k] != sep {
			return 0
		}
		e, d := digits(s, k+1, 2)
		if e == k+1 || d < 1 || d > 31 || e < len(s) && isDigitByte(s[e]) {
			return 0
		}
		if e+1 < len(s) && (s[e] == 'T' || s[e] == ' ') {
			if n := timeAt(s, e+1); n > 0 {
				return e + 1 + n - i
			}
		}
		return e - i
	}
	if j-i > 2 || j >= len(s) {
		return 0
	}
	sep := s[j]
	switch sep {
	case '/', '-', '.':
		// 20/10/2025, 10-20-2025.
		k, _ := digits(s, j+1, 2)
		if k == j+1 || k >= len(s) || s[k] != sep {
			return 0
		}
		e, _ := digits(s, k+1, 4)
		if e-(k+1) != 4 || e < len(s) && isDigitByte(s[e]) {
			return 0
		}
		return e - i
	case ' ':
		// 20 Oct 2025 (RFC 1123 without its weekday).
		if n := monthAt(s, j+1); n > 0 {
			k := j + 1 + n
			if k < len(s) && s[k] == ' ' {
				e, _ := digits(s, k+1, 4)
				if e-(k+1) == 4 && (e >= len(s) || !isDigitByte(s[e])) {
					return e + timeAfter(s, e) - i
				}
			}
		}
	}
	return 0
}

// timeAfter is the length of " 10:00:00 GMT" at s[i:] (a space then a time), or 0.
func timeAfter(s string, i int) int {
	if i+1 < len(s) && s[i] == ' ' {
		if n := timeAt(s, i+1); n > 0 {
			return 1 + n
		}
	}
	return 0
}

// timeAt is the length of a clock time at s[i:] with its optional fraction, AM/PM
// and zone, or 0.
func timeAt(s string, i int) int {
	j, h := digits(s, i, 2)
	if j == i || h > 23 || j >= len(s) || s[j] != ':' {
		return 0
	}
	k, m := digits(s, j+1, 2)
	if k-(j+1) != 2 || m > 59 || k < len(s) && isDigitByte(s[k]) {
		return 0
	}
	if k+2 < len(s) && s[k] == ':' && isDigitByte(s[k+1]) {
		e, sec := digits(s, k+1, 2)
		if e-(k+1) == 2 && sec <= 60 && (e >= len(s) || !isDigitByte(s[e])) {
			k = e
			if k+1 < len(s) && (s[k] == '.' || s[k] == ',') && isDigitByte(s[k+1]) {
				k, _ = digits(s, k+1, 9)
			}
		}
	}
	// AM/PM, then a zone, each optionally after a space.
	for _, suffixes := range [2][]string{{"AM", "PM", "am", "pm"}, {"Z", "UTC", "GMT", "+", "-"}} {
		at := k
		if at < len(s) && s[at] == ' ' {
			at++
		}
		for _, sfx := range suffixes {
			if !strings.HasPrefix(s[at:], sfx) {
				continue
			}
			e := at + len(sfx)
			if sfx == "+" || sfx == "-" {
				// ±HH:MM or ±HHMM, right after the time.
				if at != k {
					break
				}
				d, _ := digits(s, e, 2)
				if d-e != 2 {
					break
				}
				if d < len(s) && s[d] == ':' {
					d++
				}
				f, _ := digits(s, d, 2)
				if f-d != 2 {
					break
				}
				e = f
			}
			if e < len(s) && isWordByte(s[e]) {
				break
			}
			k = e
			break
		}
	}
	return k - i
}

var (
	monthNames = []string{"January", "February", "March", "April", "May", "June", "July",
		"August", "September", "October", "November", "December",
		"Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sept", "Sep", "Oct", "Nov", "Dec"}
	dayNames = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
		"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
)

// nameAt is the length of the name in names at s[i:] that ends a word, or 0. Every
// name starts with a capital letter, and most words do not: a word is compared only
// with the names that share its first letter (comparing each with every name was
// most of Stable's time over a long prompt).
func nameAt(s string, i int, names []string) int {
	if i >= len(s) {
		return 0 // "20 " or "Mon, " ending the text: no month follows
	}
	c := s[i]
	if c < 'A' || c > 'Z' {
		return 0
	}
	for _, n := range names {
		if n[0] == c && strings.HasPrefix(s[i:], n) && (i+len(n) >= len(s) || !isWordByte(s[i+len(n)])) {
			return len(n)
		}
	}
	return 0
}

func monthAt(s string, i int) int { return nameAt(s, i, monthNames) }

// namedDateAt is the length of a date that starts with a weekday or month name at
// s[i:] ("Mon, 20 Oct 2025 10:00:00 GMT", "Monday, October 20, 2025", "Oct 20 2025"),
// or 0. A date without its year is not volatile enough to tell from a task's words.
func namedDateAt(s string, i int) int {
	j := i
	if n := nameAt(s, j, dayNames); n > 0 {
		j += n
		if !strings.HasPrefix(s[j:], ", ") {
			return 0
		}
		j += 2
		if j < len(s) && isDigitByte(s[j]) {
			// RFC 1123: the weekday, then day month year.
			n := dateAt(s, j)
			if n == 0 {
				return 0
			}
			return j + n - i
		}
	}
	n := monthAt(s, j)
	if n == 0 {
		return 0
	}
	j += n
	if j >= len(s) || s[j] != ' ' {
		return 0
	}
	k, d := digits(s, j+1, 2)
	if k == j+1 || d < 1 || d > 31 {
		return 0
	}
	for _, sfx := range []string{"st", "nd", "rd", "th"} {
		if strings.HasPrefix(s[k:], sfx) {
			k += len(sfx)
			break
		}
	}
	if k < len(s) && s[k] == ',' {
		k++
	}
	if k >= len(s) || s[k] != ' ' {
		return 0
	}
	e, _ := digits(s, k+1, 4)
	if e-(k+1) != 4 || e < len(s) && isWordByte(s[e]) {
		return 0
	}
	return e + timeAfter(s, e) - i
}

// datePhrases introduce the current date; what follows them on their line is volatile.
var datePhrases = []string{"today's date is", "today’s date is", "today's date:", "today’s date:",
	"current date:", "the current date is"}

// datePhraseAt returns the length of a date phrase at s[i:] and the rest of its
// line, and the length of the phrase (which is kept); 0 when there is none.
func datePhraseAt(s string, i int) (n, keep int) {
	// Each phrase starts "to", "th" or "cu": most words that start with t or c do not.
	if len(s)-i < 2 {
		return 0, 0
	}
	c, c2 := s[i]|0x20, s[i+1]|0x20
	if !(c == 't' && (c2 == 'o' || c2 == 'h') || c == 'c' && c2 == 'u') {
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

// tokenAt is the length of the random-looking token at s[i:]: 20 or more of
// A-Z a-z 0-9 _ - with at least 4 digits and 4 letters; or 0.
func tokenAt(s string, i int) int {
	nd, nl, j := 0, 0, i
	for ; j < len(s); j++ {
		c := s[j]
		switch {
		case isDigitByte(c):
			nd++
		case isLetterByte(c):
			nl++
		case c == '_' || c == '-':
		default:
			goto done
		}
	}
done:
	if j-i >= 20 && nd >= 4 && nl >= 4 {
		return j - i
	}
	return 0
}

// hexAt is the length of the hex id at s[i:] — 8 or more hex digits with at least one
// digit and one letter, ending a word — or 0.
func hexAt(s string, i int) int {
	nd, nl, j := 0, 0, i
	for ; j < len(s) && isHexByte(s[j]); j++ {
		if isDigitByte(s[j]) {
			nd++
		} else {
			nl++
		}
	}
	if j-i < 8 || nd == 0 || nl == 0 || j < len(s) && isWordByte(s[j]) {
		return 0
	}
	return j - i
}

// pathByte reports whether c may be part of a path segment. Bytes of multi-byte
// UTF-8 characters are: folder names are not all ASCII.
func pathByte(c byte) bool {
	return isWordByte(c) || c == '.' || c == '-' || c == '~' || c == '@' || c == '%' || c == '+' || c >= 0x80
}

// pathAt is the length of the absolute path at s[i:] (s[i] is '/' or '~'), or 0: it
// must start a word (not follow a letter, a digit, '.' or '/'), and a /path needs two
// segments, so that "/review" or "and/or" stay.
func pathAt(s string, i int) int {
	if i > 0 {
		if p := s[i-1]; isWordByte(p) || p == '.' || p == '/' || p == '-' || p == '~' || p >= 0x80 {
			return 0
		}
	}
	j, need := i, 2
	if s[i] == '~' {
		if i+1 >= len(s) || s[i+1] != '/' {
			return 0
		}
		j, need = i+1, 1
	}
	segs := 0
	for j < len(s) && s[j] == '/' {
		k := j + 1
		for k < len(s) && pathByte(s[k]) {
			k++
		}
		if k == j+1 {
			break // "//" or a trailing '/'
		}
		segs++
		j = k
	}
	if segs < need {
		return 0
	}
	if j < len(s) && s[j] == '/' && (j+1 >= len(s) || s[j+1] != '/') {
		j++ // a trailing slash belongs to the path
	}
	for j > i && s[j-1] == '.' {
		j-- // a sentence's full stop does not
	}
	return j - i
}

// windowsPathAt is the length of the Windows path (C:\dir\…) at s[i:], or 0.
func windowsPathAt(s string, i int) int {
	if i+3 >= len(s) || s[i+1] != ':' || s[i+2] != '\\' {
		return 0
	}
	j := i + 2
	for j < len(s) && s[j] == '\\' {
		k := j + 1
		for k < len(s) && pathByte(s[k]) {
			k++
		}
		if k == j+1 {
			break
		}
		j = k
	}
	for j > i && s[j-1] == '.' {
		j--
	}
	if j <= i+3 {
		return 0
	}
	return j - i
}
