package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func fixtureHTML(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := fixtureReport(t).WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHTMLSelfContained: the page needs nothing from anywhere: no script, no
// style sheet, image or font by URL; its charts are inline SVG that parses as XML.
func TestHTMLSelfContained(t *testing.T) {
	page := fixtureHTML(t)
	s := string(page)
	for _, bad := range []string{"<script", "<link", "<img", "<iframe", "@import", "url(", "src="} {
		if strings.Contains(s, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	// The only URL is the SVG namespace, which is a name and is never fetched.
	for _, u := range regexp.MustCompile(`https?://[^"'\s<>]*`).FindAllString(s, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("page refers to %s", u)
		}
	}
	for _, want := range []string{"<title>camproxy report \u2014 file:///fixture</title>", "cam beats baseline by +30.0 points, p = 0.0066",
		"Mean reward by arm", "Cumulative mean reward", "<polyline", "pass@4"} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(s, -1)
	if len(svgs) != 2 {
		t.Fatalf("%d SVG charts, want 2", len(svgs))
	}
	for i, svg := range svgs {
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("chart %d is not well-formed: %v", i, err)
			}
		}
	}
	// One bar and one line per arm, each in the arm's colour.
	for i := range 4 {
		if n := strings.Count(svgs[0], `fill="`+Color(i)+`"`); n != 1 {
			t.Errorf("bar chart has %d bars in %s, want 1", n, Color(i))
		}
		if n := strings.Count(svgs[1], `stroke="`+Color(i)+`"`); n != 1 {
			t.Errorf("time chart has %d lines in %s, want 1", n, Color(i))
		}
	}
}

// TestHTMLEscapes: arm names and the source are text, never markup.
func TestHTMLEscapes(t *testing.T) {
	evil := `<script>alert("x")</script>`
	r, err := New(buf(ep(evil, "t", ptr(1.0)), ep("baseline", "t", ptr(0.0))), Options{Source: `file:///a"b<c>`})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteHTML(&out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "<script") || strings.Contains(s, `a"b<c>`) || !strings.Contains(s, "&lt;script&gt;") {
		t.Errorf("not escaped:\n%s", s)
	}
}

// TestHTMLNoRewards: a buffer without a single reward still renders.
func TestHTMLNoRewards(t *testing.T) {
	r, err := New(buf(ep("baseline", "t", nil), ep("cam", "t", nil)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteHTML(&out); err != nil || !strings.Contains(out.String(), "no rewarded episodes") {
		t.Errorf("%v\n%s", err, out.String())
	}
}

// TestHTMLScreenshot opens the page in headless Chromium and checks in the
// screenshot that the charts were drawn: in the left chart a solid bar of each
// arm's colour, in the right chart a line of each arm's colour. Without Chromium
// the test skips, unless CAMPROXY_REQUIRE_CHROMIUM=1 (make test, after
// scripts/test-deps.sh installed it). CAMPROXY_SCREENSHOT_DIR keeps the page and
// the PNG for a person to look at.
func TestHTMLScreenshot(t *testing.T) {
	page := fixtureHTML(t)
	dir := os.Getenv("CAMPROXY_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	htmlPath, pngPath := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.png")
	if err := os.WriteFile(htmlPath, page, 0o644); err != nil {
		t.Fatal(err)
	}
	const w, h = 1200, 900
	screenshot(t, htmlPath, pngPath, w, h)

	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	// The charts sit side by side: the bar chart in the left half, the time chart in
	// the right half (figures are 560 px wide in a 1180 px column).
	left, right := image.Rect(0, 0, w/2, h), image.Rect(w/2, 0, w, h)
	for i := range 4 {
		c := parseHex(t, Color(i))
		bars := blobs(img, left, c)
		var bar *blob
		for j := range bars {
			b := &bars[j]
			// A bar is a filled rectangle (split in two by its whisker); legend and table
			// swatches are 12 px.
			if b.box.Dx() >= 20 && b.box.Dy() >= 20 && float64(b.n) >= 0.9*float64(b.box.Dx()*b.box.Dy()) {
				bar = b
				break
			}
		}
		if bar == nil {
			t.Errorf("arm %d (%s): no bar in the bar chart; blobs %v", i, Color(i), bars)
		}
		// A line of 2.5 px across most of the 488 px plot covers far more pixels than
		// the legend's 12 × 12 swatch.
		n := 0
		for _, b := range blobs(img, right, c) {
			if b.box.Dx() > 100 {
				n += b.n
			}
		}
		if n < 300 {
			t.Errorf("arm %d (%s): %d pixels of its line in the time chart, want ≥ 300", i, Color(i), n)
		}
	}
	t.Logf("screenshot %s", pngPath)
}

func parseHex(t *testing.T, s string) color.RGBA {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "#"), 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 255}
}

// blob is a 4-connected region of pixels of one colour.
type blob struct {
	box image.Rectangle
	n   int
}

func (b blob) String() string { return fmt.Sprintf("%v:%d", b.box, b.n) }

// blobs finds the regions of pixels of colour c inside r: c itself, or c
// blended with the white page at least half and half (the anti-aliased edge of a
// line), give or take a few steps that colour management may add.
func blobs(img image.Image, r image.Rectangle, c color.RGBA) []blob {
	const tol = 8
	want := [3]int{int(c.R), int(c.G), int(c.B)}
	match := func(x, y int) bool {
		pr, pg, pb, _ := img.At(x, y).RGBA()
		got := [3]int{int(pr >> 8), int(pg >> 8), int(pb >> 8)}
		// The blend factor from the channel that is farthest from white.
		k := 0
		for i := range 3 {
			if want[i] < want[k] {
				k = i
			}
		}
		alpha := float64(255-got[k]) / float64(255-want[k])
		if alpha < 0.5 || alpha > 1.05 {
			return false
		}
		for i := range 3 {
			blend := alpha*float64(want[i]) + (1-alpha)*255
			if absDiff(got[i], int(blend+0.5)) > tol {
				return false
			}
		}
		return true
	}
	r = r.Intersect(img.Bounds())
	seen := make([]bool, r.Dx()*r.Dy())
	idx := func(x, y int) int { return (y-r.Min.Y)*r.Dx() + x - r.Min.X }
	var out []blob
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if seen[idx(x, y)] || !match(x, y) {
				continue
			}
			b := blob{box: image.Rect(x, y, x+1, y+1)}
			stack := []image.Point{{x, y}}
			seen[idx(x, y)] = true
			for len(stack) > 0 {
				p := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				b.n++
				b.box = b.box.Union(image.Rect(p.X, p.Y, p.X+1, p.Y+1))
				for _, q := range []image.Point{{p.X + 1, p.Y}, {p.X - 1, p.Y}, {p.X, p.Y + 1}, {p.X, p.Y - 1}} {
					if q.In(r) && !seen[idx(q.X, q.Y)] && match(q.X, q.Y) {
						seen[idx(q.X, q.Y)] = true
						stack = append(stack, q)
					}
				}
			}
			out = append(out, b)
		}
	}
	return out
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}
