package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// Palette is the arms' colours, in arm order (by name), repeating past the end:
// Okabe and Ito's colour-blind-safe set without its yellow, which is unreadable on
// white, then two more of Tol's.
var Palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#44AA99"}

// Color is the colour of the i-th arm.
func Color(i int) string { return Palette[i%len(Palette)] }

// color is the colour of the named arm.
func (r *Report) color(arm string) string {
	for i, a := range r.Arms {
		if a.Name == arm {
			return Color(i)
		}
	}
	return "#999"
}

// Chart geometry, in CSS pixels: both charts share it.
const (
	chartW, chartH                     = 560, 340
	padLeft, padRight, padTop, padBott = 56, 16, 18, 52
	plotW, plotH                       = chartW - padLeft - padRight, chartH - padTop - padBott
	maxSeriesPoints                    = 400 // points drawn per arm in the time chart
)

const pageCSS = `
*{box-sizing:border-box}
body{margin:0;background:#fff;color:#1a1a1a;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 20px 40px}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:16px;margin:28px 0 8px}
.sub{color:#555;margin:0 0 12px}
ul.verdicts{list-style:none;padding:0;margin:0 0 16px}
ul.verdicts li{margin:3px 0;padding:4px 10px;border-left:4px solid #bbb;background:#f6f6f6}
ul.verdicts li.win{border-color:#1b7f3b}
ul.verdicts li.loss{border-color:#b3261e}
.charts{display:flex;flex-wrap:wrap;gap:20px}
figure{margin:0;width:560px}
figcaption{font-weight:600;margin:0 0 4px}
svg text{font:12px system-ui,"DejaVu Sans",sans-serif;fill:#333}
.legend{margin:4px 0 0 56px}
.key{display:inline-block;margin-right:16px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
table{border-collapse:collapse;margin:4px 0}
th,td{padding:5px 12px;border-bottom:1px solid #e2e2e2;text-align:right;white-space:nowrap}
th{background:#f3f3f3;font-weight:600}
th:first-child,td:first-child,.l{text-align:left}
.notes{color:#555;font-size:12.5px;max-width:900px}
`

// WriteHTML writes the report as one self-contained page: no script, no external
// style sheet, font or image; the charts are inline SVG.
func (r *Report) WriteHTML(w io.Writer) error {
	ew := &errWriter{w: w}
	writePageHead(ew, r.Source)
	r.writeHTMLBody(ew)
	writePageFoot(ew, r.notes()+learnNote(r.Learning))
	return ew.err
}

// writePageHead opens the page, up to its title.
func writePageHead(ew *errWriter, source string) {
	title := "camproxy report"
	if source != "" {
		title += " \u2014 " + source
	}
	ew.printf("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	ew.printf("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	ew.printf("<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", html.EscapeString(title), pageCSS)
	ew.printf("<h1>camproxy report</h1>\n")
}

// writePageFoot writes the notes under everything and closes the page.
func writePageFoot(ew *errWriter, notes string) {
	ew.printf("<p class=\"notes\">%s</p>\n</main>\n</body>\n</html>\n", html.EscapeString(notes))
}

// writeHTMLBody is the report under the page's title: what it covers, the
// verdicts, the charts and the tables.
func (r *Report) writeHTMLBody(ew *errWriter) {
	esc := html.EscapeString
	ew.printf("<p class=\"sub\">%s</p>\n", esc(r.heading()))
	if r.Experiment != "" && r.Unlabelled > 0 {
		ew.printf("<p class=\"sub\">%d episodes record no experiment and are counted under %s.</p>\n", r.Unlabelled, esc(r.Experiment))
	}
	if len(r.Comparisons) > 0 {
		ew.printf("<ul class=\"verdicts\">\n")
		for _, c := range r.Comparisons {
			class := ""
			if c.Significant {
				class = " class=\"win\""
				if *c.Lift < 0 {
					class = " class=\"loss\""
				}
			}
			ew.printf("<li%s>%s</li>\n", class, esc(c.Verdict))
		}
		ew.printf("</ul>\n")
	}
	if r.SynthesisedTimes > 0 {
		ew.printf("<p class=\"sub\">%s.</p>\n", esc(r.synthesisedNote()))
	}
	lo, hi := r.rewardRange()
	ew.printf("<div class=\"charts\">\n<figure>\n<figcaption>Mean reward by arm, with 95%% confidence intervals</figcaption>\n")
	r.writeBars(ew, lo, hi)
	ew.printf("</figure>\n")
	if r.timed() {
		ew.printf("<figure>\n<figcaption>Cumulative mean reward by episode start time</figcaption>\n")
		r.writeLines(ew, lo, hi)
		ew.printf("<div class=\"legend\">")
		for i, a := range r.Arms {
			ew.printf("<span class=\"key\"><span class=\"sw\" style=\"background:%s\"></span>%s</span>", Color(i), esc(a.Name))
		}
		ew.printf("</div>\n</figure>\n")
	}
	ew.printf("</div>\n")
	r.writeLearningHTML(ew, lo, hi)
	r.writeTables(ew)
}

// timed reports whether some rewarded episode has a recorded start time to draw
// the cumulative chart over, or no episode is rewarded yet (the chart says so).
func (r *Report) timed() bool {
	rewarded := false
	for _, a := range r.Arms {
		if len(r.series[a.Name]) > 0 {
			return true
		}
		rewarded = rewarded || a.Rewarded > 0
	}
	return !rewarded
}

// rewardRange is the y range both charts share: [0, 1] when rewards are in [0, 1]
// (points), else a rounded range around every mean and interval.
func (r *Report) rewardRange() (lo, hi float64) {
	if r.Unit == "points" {
		return 0, 1
	}
	lo, hi = 0, 0
	for _, a := range r.Arms {
		if a.MeanReward != nil {
			lo, hi = math.Min(lo, *a.MeanReward), math.Max(hi, *a.MeanReward)
		}
		if a.CI95 != nil {
			lo, hi = math.Min(lo, a.CI95[0]), math.Max(hi, a.CI95[1])
		}
		for _, p := range r.series[a.Name] {
			lo, hi = math.Min(lo, p.Mean), math.Max(hi, p.Mean)
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// yAxis draws the horizontal grid lines and their labels, and returns the value →
// y mapping, clamped to the plot.
func yAxis(ew *errWriter, lo, hi float64, label string) func(float64) float64 {
	y := func(v float64) float64 {
		v = math.Max(lo, math.Min(hi, v))
		return padTop + plotH*(hi-v)/(hi-lo)
	}
	step := niceStep((hi - lo) / 5)
	for v := lo; v <= hi+step/2; v += step {
		yy := y(v)
		ew.printf("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>", padLeft, padLeft+plotW, yy, yy)
		ew.printf("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", padLeft-8, yy, trimFloat(v))
	}
	ew.printf("<text transform=\"translate(14 %d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", padTop+plotH/2, html.EscapeString(label))
	return y
}

// trimFloat writes a tick value without trailing zeros.
func trimFloat(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	s := fmt.Sprintf("%.4f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func svgOpen(ew *errWriter, label string) {
	ew.printf("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s\">\n",
		chartW, chartH, chartW, chartH, html.EscapeString(label))
	ew.printf("<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", chartW, chartH)
}

// writeBars draws the bar chart: one bar per arm at its mean reward, a whisker
// over its 95% interval (clamped to the axis), the mean above it and the number of
// rewarded episodes under the arm's name.
func (r *Report) writeBars(ew *errWriter, lo, hi float64) {
	svgOpen(ew, "mean reward by arm with 95% confidence intervals")
	y := yAxis(ew, lo, hi, "mean reward")
	slot := float64(plotW) / float64(max(len(r.Arms), 1))
	barW := math.Min(slot*0.6, 96)
	zero := y(math.Max(lo, math.Min(0, hi)))
	for i, a := range r.Arms {
		cx := padLeft + slot*(float64(i)+0.5)
		name := a.Name
		if len([]rune(name)) > 18 {
			name = string([]rune(name)[:17]) + "\u2026"
		}
		ew.printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s<title>%s</title></text>\n",
			cx, padTop+plotH+18, html.EscapeString(name), html.EscapeString(a.Name))
		ew.printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#777\" style=\"fill:#777\">n = %d</text>\n", cx, padTop+plotH+34, a.Rewarded)
		if a.MeanReward == nil {
			ew.printf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" style=\"fill:#777\">no rewards</text>\n", cx, zero-8)
			continue
		}
		m := y(*a.MeanReward)
		top, h := math.Min(m, zero), math.Abs(zero-m)
		ew.printf("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s: %.3f</title></rect>\n",
			cx-barW/2, top, barW, h, Color(i), html.EscapeString(a.Name), *a.MeanReward)
		capW := barW * 0.22
		if a.CI95 != nil {
			y0, y1 := y(a.CI95[0]), y(a.CI95[1])
			ew.printf("<g stroke=\"#222\" stroke-width=\"1.6\"><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", cx, cx, y0, y1)
			ew.printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", cx-capW, cx+capW, y0, y0)
			ew.printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/></g>\n", cx-capW, cx+capW, y1, y1)
		}
		// The mean goes just above the bar's top, right of the whisker and its caps.
		ew.printf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\">%.3f</text>\n", cx+capW+4, math.Max(top-5, padTop+10), *a.MeanReward)
	}
	ew.printf("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", padLeft, padLeft+plotW, zero, zero)
	ew.printf("</svg>\n")
}

// writeLines draws each arm's cumulative mean reward against episode start time.
func (r *Report) writeLines(ew *errWriter, lo, hi float64) {
	svgOpen(ew, "cumulative mean reward by episode start time, one line per arm")
	y := yAxis(ew, lo, hi, "cumulative mean reward")
	var t0, t1 time.Time
	for _, a := range r.Arms {
		for _, p := range r.series[a.Name] {
			if t0.IsZero() || p.At.Before(t0) {
				t0 = p.At
			}
			if p.At.After(t1) {
				t1 = p.At
			}
		}
	}
	if t0.IsZero() {
		ew.printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no rewarded episodes</text>\n</svg>\n", padLeft+plotW/2, padTop+plotH/2)
		return
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return padLeft + plotW*float64(t.Sub(t0))/float64(span) }
	layout := timeLayout(span)
	for _, t := range timeTicks(t0, t0.Add(span)) {
		xx := x(t)
		ew.printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>", xx, xx, padTop+plotH, padTop+plotH+4)
		ew.printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", xx, padTop+plotH+18, t.UTC().Format(layout))
	}
	ew.printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" style=\"fill:#777\">episode start (UTC)</text>\n", padLeft+plotW/2, padTop+plotH+38)
	ew.printf("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", padLeft, padLeft+plotW, padTop+plotH, padTop+plotH)
	for i, a := range r.Arms {
		pts := thin(r.series[a.Name], maxSeriesPoints)
		switch len(pts) {
		case 0:
			continue
		case 1:
			ew.printf("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", x(pts[0].At), y(pts[0].Mean), Color(i))
			continue
		}
		var b strings.Builder
		for j, p := range pts {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(p.At), y(p.Mean))
		}
		ew.printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" stroke-linejoin=\"round\" points=\"%s\"><title>%s</title></polyline>\n",
			Color(i), b.String(), html.EscapeString(a.Name))
	}
	ew.printf("</svg>\n")
}

// tickSteps are the round steps a time axis may use.
var tickSteps = []time.Duration{
	time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 30 * 24 * time.Hour,
	91 * 24 * time.Hour, 365 * 24 * time.Hour,
}

// timeTicks returns round times (multiples of a step, in UTC) within [t0, t1], at
// most six of them.
func timeTicks(t0, t1 time.Time) []time.Time {
	span := t1.Sub(t0)
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/s <= 5 {
			step = s
			break
		}
	}
	var out []time.Time
	for t := t0.UTC().Truncate(step); !t.After(t1); t = t.Add(step) {
		if !t.Before(t0) {
			out = append(out, t)
		}
	}
	return out
}

// timeLayout picks a time format for ticks over a span.
func timeLayout(span time.Duration) string {
	switch {
	case span < 30*time.Minute:
		return "15:04:05"
	case span < 24*time.Hour:
		return "15:04"
	case span < 120*24*time.Hour:
		return "Jan 2 15:04"
	default:
		return "2006-01-02"
	}
}

// thin keeps at most n points of a series, evenly spaced, always the last.
func thin(pts []Point, n int) []Point {
	if len(pts) <= n {
		return pts
	}
	out := make([]Point, 0, n)
	step := float64(len(pts)-1) / float64(n-1)
	for i := range n {
		out = append(out, pts[int(math.Round(float64(i)*step))])
	}
	return out
}

func (r *Report) writeTables(ew *errWriter) {
	esc := html.EscapeString
	ew.printf("<h2>Arms</h2>\n<table>\n<tr><th>arm</th><th>episodes</th><th>rewarded</th><th>mean reward</th><th>95%% CI</th><th>success</th><th>turns</th><th>wall time (mean)</th><th>context latency (mean)</th></tr>\n")
	for i, a := range r.Arms {
		ew.printf("<tr><td><span class=\"sw\" style=\"background:%s\"></span>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			Color(i), esc(a.Name), a.Episodes, a.Rewarded, fmtNum(a.MeanReward, "%.3f"), fmtCI(a.CI95), fmtPercent(a.SuccessRate),
			fmtNum(a.MeanTurns, "%.1f"), fmtSeconds(a.MeanWallSeconds), fmtMs(a.MeanContextMs))
	}
	ew.printf("</table>\n")
	if ks := r.passKs(); len(ks) > 0 {
		ew.printf("<h2>pass@k</h2>\n<table>\n<tr><th>arm</th>")
		for _, k := range ks {
			ew.printf("<th>pass@%d</th>", k)
		}
		ew.printf("</tr>\n")
		for i, a := range r.Arms {
			ew.printf("<tr><td><span class=\"sw\" style=\"background:%s\"></span>%s</td>", Color(i), esc(a.Name))
			for _, k := range ks {
				ew.printf("<td>%s</td>", esc(fmtPassK(a.PassAtK, k)))
			}
			ew.printf("</tr>\n")
		}
		ew.printf("</table>\n")
	}
	if len(r.Comparisons) > 0 {
		ew.printf("<h2>Against %s</h2>\n<table>\n<tr><th>arm</th><th>lift</th><th>p-value</th><th class=\"l\">test</th><th>rewarded episodes per arm for %g%% power</th><th>more per arm still needed</th></tr>\n", esc(r.Control), Power*100)
		for _, c := range r.Comparisons {
			lift, p, need, more := dash, dash, dash, dash
			if c.LiftPoints != nil {
				lift = r.formatLift(*c.LiftPoints)
			}
			if c.P != nil {
				p = strings.TrimPrefix(FormatP(*c.P), "= ")
			}
			if c.EpisodesPerArm != nil {
				need = fmt.Sprint(*c.EpisodesPerArm)
			}
			if c.MoreEpisodes != nil {
				more = fmt.Sprint(*c.MoreEpisodes)
			}
			ew.printf("<tr><td><span class=\"sw\" style=\"background:%s\"></span>%s</td><td>%s</td><td>%s</td><td class=\"l\">%s</td><td>%s</td><td>%s</td></tr>\n",
				r.color(c.Arm), esc(c.Arm), esc(lift), esc(p), esc(strings.TrimSpace(strings.Trim(c.method(), " []"))), need, more)
		}
		ew.printf("</table>\n")
	}
}

// notes explains how the numbers were made, under the tables.
func (r *Report) notes() string {
	return fmt.Sprintf("Means are over rewarded episodes; the 95%% interval is Wilson's score interval when every reward is 0 or 1, "+
		"else mean \u00b1 t(0.975, n\u22121)\u00b7sd/\u221an clipped to the observed reward range. "+
		"Success is the harness's success flag, else reward \u2265 1. pass@k is the unbiased estimator 1 \u2212 C(n\u2212c, k)/C(n, k) "+
		"averaged over the tasks with at least k rewarded runs on the arm (tasks in brackets). "+
		"p-values are two-sided: Welch's t-test when both arms have at least %d rewarded episodes, else a permutation test "+
		"(%d seeded resamples). Significant means p < %g; episodes needed are rewarded episodes per arm for power %g at the observed lift and pooled standard deviation, "+
		"and more needed is that minus the smaller arm's rewarded episodes. "+
		"Turns, wall time and context latency (the first step's augment time) are over episodes with at least one step.",
		MinWelch, Resamples, r.Alpha, Power)
}
