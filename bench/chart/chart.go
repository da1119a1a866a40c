// Package chart draws a benchmark run's latency and backlog over time as
// one SVG file, with the standard library and x/text's number printer:
// each send a dot at the time it was due, at its latency on a log scale on
// the left (from fractions of a millisecond to minutes), the backlog a line
// on a linear scale on the right, the aim a dashed line across, and the
// run's phases as marks. The isolation and fairness runs (package bench) draw it for
// docs/benchmarks.md.
package chart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Send is one send: when it was due, since the run began, and how long it
// took from then to reach the provider.
type Send struct {
	At, Latency time.Duration
}

// Count is one sample of the backlog.
type Count struct {
	At time.Duration
	N  int64
}

// Mark is a moment of the run (a phase beginning) drawn as a labelled
// vertical line.
type Mark struct {
	At    time.Duration
	Label string
}

// Chart is what one run draws.
type Chart struct {
	Title, Subtitle string
	// Sends are drawn as dots, labelled SendsLabel in the legend.
	Sends      []Send
	SendsLabel string
	// Backlog is drawn as a line on the right axis, labelled BacklogLabel;
	// none draws no right axis.
	Backlog      []Count
	BacklogLabel string
	// Aim, when not zero, is drawn as a dashed line at that latency.
	Aim   time.Duration
	Marks []Mark
	// Note, when set, is a line of small print under the chart (the
	// machine's load, say).
	Note string
}

// The canvas and the plot area inside it, in SVG user units.
const (
	width, height        = 960.0, 500.0
	plotLeft, plotRight  = 80.0, 870.0
	plotTop, plotBottom  = 106.0, 434.0
	minLatency           = 100 * time.Microsecond // the lowest the left axis goes
	maxXTicks, maxYTicks = 10, 6
)

// Colours of the series.
const (
	sendColour    = "#1f5fbf"
	backlogColour = "#e07b00"
	aimColour     = "#c62828"
)

// scales maps a chart's values to positions in the plot area.
type scales struct {
	tMax           float64 // seconds at the right edge
	tStep          float64
	latLo, latHi   float64 // milliseconds at the bottom and top, whole decades
	countMax       float64
	countStep      float64
	hasBacklogAxis bool
}

func (c *Chart) scales() scales {
	var s scales
	var tEnd float64
	lo, hi := math.Inf(1), 0.0
	for _, p := range c.Sends {
		tEnd = max(tEnd, p.At.Seconds())
		ms := max(msOf(p.Latency), msOf(minLatency))
		lo, hi = min(lo, ms), max(hi, ms)
	}
	var most int64
	for _, p := range c.Backlog {
		tEnd = max(tEnd, p.At.Seconds())
		most = max(most, p.N)
	}
	for _, m := range c.Marks {
		tEnd = max(tEnd, m.At.Seconds())
	}
	if c.Aim > 0 {
		lo, hi = min(lo, msOf(c.Aim)), max(hi, msOf(c.Aim))
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 1000
	}
	s.latLo = math.Pow(10, math.Floor(math.Log10(lo)))
	s.latHi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if s.latHi <= s.latLo {
		s.latHi = s.latLo * 10
	}
	s.tStep = niceStep(tEnd, maxXTicks)
	s.tMax = math.Max(1, math.Ceil(tEnd/s.tStep)) * s.tStep
	s.hasBacklogAxis = len(c.Backlog) > 0
	s.countStep = niceStep(float64(most), maxYTicks)
	s.countMax = math.Max(1, math.Ceil(float64(most)/s.countStep)) * s.countStep
	return s
}

// niceStep is the smallest of 1, 2, 2.5 and 5 times a power of ten that
// divides 0…v into at most n steps.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	for p := math.Pow(10, math.Floor(math.Log10(v/float64(n)))); ; p *= 10 {
		for _, m := range []float64{1, 2, 2.5, 5} {
			if step := m * p; math.Ceil(v/step) <= float64(n) {
				return step
			}
		}
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// x is the position of t seconds.
func (s scales) x(t float64) float64 {
	return plotLeft + (plotRight-plotLeft)*t/s.tMax
}

// yLatency is the position of ms milliseconds on the left (log) axis; what
// is below its bottom is drawn at the bottom.
func (s scales) yLatency(ms float64) float64 {
	ms = max(ms, s.latLo)
	f := (math.Log10(ms) - math.Log10(s.latLo)) / (math.Log10(s.latHi) - math.Log10(s.latLo))
	return plotBottom - (plotBottom-plotTop)*f
}

// yCount is the position of n on the right (linear) axis.
func (s scales) yCount(n float64) float64 {
	return plotBottom - (plotBottom-plotTop)*n/s.countMax
}

// WriteFile writes the chart's SVG to path.
func (c *Chart) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := c.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// WriteSVG writes the chart as one SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	s := c.scales()
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	p(`<rect width="%g" height="%g" fill="#ffffff"/>`+"\n", width, height)
	p(`<text x="16" y="26" font-size="15" font-weight="bold">%s</text>`+"\n", esc(c.Title))
	if c.Subtitle != "" {
		p(`<text x="16" y="46" fill="#444444">%s</text>`+"\n", esc(c.Subtitle))
	}

	// The left axis: a tick and a grid line at every decade.
	p(`<g class="latency-axis" font-size="11" fill="#333333">` + "\n")
	for v := s.latLo; v <= s.latHi*1.0001; v *= 10 {
		p(`<g transform="translate(%s,%s)"><line x2="%s" stroke="#e4e4e4"/><line x1="-5" stroke="#666666"/><text x="-8" dy="4" text-anchor="end">%s</text></g>`+"\n",
			num(plotLeft), num(s.yLatency(v)), num(plotRight-plotLeft), msLabel(v))
		for m := 2.0; m < 10 && v < s.latHi; m++ {
			p(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#f3f3f3"/>`+"\n",
				num(plotLeft), num(plotRight), num(s.yLatency(v*m)), num(s.yLatency(v*m)))
		}
	}
	p(`<text transform="translate(22,%s) rotate(-90)" text-anchor="middle" font-size="12">%s</text>`+"\n",
		num((plotTop+plotBottom)/2), esc("latency: due → provider call (log scale)"))
	p("</g>\n")

	// The time axis.
	p(`<g class="time-axis" font-size="11" fill="#333333">` + "\n")
	for t := 0.0; t <= s.tMax+s.tStep/1000; t += s.tStep {
		p(`<g transform="translate(%s,%s)"><line y2="5" stroke="#666666"/><text y="18" text-anchor="middle">%s s</text></g>`+"\n",
			num(s.x(t)), num(plotBottom), strconv.FormatFloat(t, 'f', -1, 64))
	}
	p(`<text x="%s" y="%s" text-anchor="middle" font-size="12">time since the run began</text>`+"\n",
		num((plotLeft+plotRight)/2), num(plotBottom+38))
	if c.Note != "" {
		p(`<text x="16" y="%s" font-size="10" fill="#777777">%s</text>`+"\n", num(height-8), esc(c.Note))
	}
	p("</g>\n")

	// The right axis.
	if s.hasBacklogAxis {
		p(`<g class="backlog-axis" font-size="11" fill="%s">`+"\n", backlogColour)
		for n := 0.0; n <= s.countMax+s.countStep/1000; n += s.countStep {
			p(`<g transform="translate(%s,%s)"><line x2="5" stroke="%s"/><text x="8" dy="4">%s</text></g>`+"\n",
				num(plotRight), num(s.yCount(n)), backlogColour, Thousands(int64(math.Round(n))))
		}
		p(`<text transform="translate(%s,%s) rotate(90)" text-anchor="middle" font-size="12">%s</text>`+"\n",
			num(width-18), num((plotTop+plotBottom)/2), esc(c.BacklogLabel))
		p("</g>\n")
	}
	p(`<rect class="plot" x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#999999"/>`+"\n",
		num(plotLeft), num(plotTop), num(plotRight-plotLeft), num(plotBottom-plotTop))

	// Marks, their labels on alternating rows above the plot.
	for i, m := range c.Marks {
		x := s.x(m.At.Seconds())
		p(`<g class="mark"><line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#888888" stroke-dasharray="2 3"/><text x="%s" y="%s" font-size="11" fill="#555555">%s</text></g>`+"\n",
			num(x), num(x), num(plotTop-4-float64(i%2)*13), num(plotBottom), num(x+3), num(plotTop-6-float64(i%2)*13), esc(m.Label))
	}

	// The series: the backlog under the sends, the aim over both.
	if len(c.Backlog) > 0 {
		p(`<polyline class="backlog" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="`, backlogColour)
		for i, pt := range c.Backlog {
			if i > 0 {
				p(" ")
			}
			p("%s,%s", num(s.x(pt.At.Seconds())), num(s.yCount(float64(pt.N))))
		}
		p(`"/>` + "\n")
	}
	if len(c.Sends) > 0 {
		// One path of zero-length segments with round caps: a dot per send
		// at a tenth of the bytes of a circle each.
		p(`<path class="sends" fill="none" stroke="%s" stroke-opacity="0.55" stroke-width="3.2" stroke-linecap="round" d="`, sendColour)
		for _, pt := range c.Sends {
			p("M%s %sh0", num(s.x(pt.At.Seconds())), num(s.yLatency(msOf(pt.Latency))))
		}
		p(`"/>` + "\n")
	}
	if c.Aim > 0 {
		y := s.yLatency(msOf(c.Aim))
		p(`<line class="aim" x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="7 4"/>`+"\n",
			num(plotLeft), num(plotRight), num(y), num(y), aimColour)
	}

	// The legend, one row above the plot's top right.
	type entry struct{ swatch, label string }
	var legend []entry
	if len(c.Sends) > 0 {
		legend = append(legend, entry{fmt.Sprintf(`<circle r="3.5" fill="%s"/>`, sendColour), c.SendsLabel})
	}
	if len(c.Backlog) > 0 {
		legend = append(legend, entry{fmt.Sprintf(`<line x1="-8" x2="8" stroke="%s" stroke-width="2"/>`, backlogColour), c.BacklogLabel + " (right)"})
	}
	if c.Aim > 0 {
		legend = append(legend, entry{fmt.Sprintf(`<line x1="-8" x2="8" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`, aimColour), "aim: " + msLabel(msOf(c.Aim))})
	}
	x := plotLeft + 8
	for _, e := range legend {
		p(`<g class="legend" transform="translate(%s,68)">%s<text x="14" dy="4" font-size="12">%s</text></g>`+"\n", num(x), e.swatch, esc(e.label))
		x += 40 + 6.6*float64(len([]rune(e.label)))
	}
	p("</svg>\n")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// num formats a position to a tenth of a unit.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// msLabel names a latency in milliseconds: "0.1 ms", "250 ms", "10 s".
func msLabel(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'g', 4, 64) + " s"
	}
	return strconv.FormatFloat(ms, 'g', 4, 64) + " ms"
}

// Thousands writes n with commas, as the backlog axis does: 20,000.
func Thousands(n int64) string { return english.Sprint(n) }

// english groups digits in thousands.
var english = message.NewPrinter(language.English)

// esc escapes text for an SVG text node or attribute.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
