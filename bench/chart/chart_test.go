package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// node is one element of a parsed SVG.
type node struct {
	name     string
	attrs    map[string]string
	text     string
	children []*node
}

// parse decodes svg with encoding/xml, failing the test on any error, and
// returns its root element.
func parse(t *testing.T, svg []byte) *node {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	root := &node{}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			if tok.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("element %s is in namespace %q, not SVG's", tok.Name.Local, tok.Name.Space)
			}
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			top.text += string(tok)
		}
	}
	if len(stack) != 1 || len(root.children) != 1 || root.children[0].name != "svg" {
		t.Fatalf("want one svg root element, got %d elements open and %d roots", len(stack)-1, len(root.children))
	}
	return root.children[0]
}

// all returns n and its descendants that match.
func (n *node) all(match func(*node) bool) []*node {
	var out []*node
	if match(n) {
		out = append(out, n)
	}
	for _, c := range n.children {
		out = append(out, c.all(match)...)
	}
	return out
}

func (n *node) class(c string) *node {
	found := n.all(func(m *node) bool { return m.attrs["class"] == c })
	if len(found) != 1 {
		return nil
	}
	return found[0]
}

var translate = regexp.MustCompile(`^translate\(([-0-9.]+),([-0-9.]+)\)$`)

// ticks maps each tick's label on the axis of class axis to its position
// (the translate of its group).
func ticks(t *testing.T, svg *node, axis string) map[string][2]float64 {
	t.Helper()
	a := svg.class(axis)
	if a == nil {
		t.Fatalf("no %s", axis)
	}
	out := map[string][2]float64{}
	for _, g := range a.children {
		m := translate.FindStringSubmatch(g.attrs["transform"])
		if g.name != "g" || m == nil {
			continue
		}
		texts := g.all(func(n *node) bool { return n.name == "text" })
		if len(texts) != 1 {
			t.Fatalf("%s tick with %d labels", axis, len(texts))
		}
		out[texts[0].text] = [2]float64{atof(t, m[1]), atof(t, m[2])}
	}
	return out
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// dots returns the sends' dots in the order drawn.
func dots(t *testing.T, svg *node) [][2]float64 {
	t.Helper()
	p := svg.class("sends")
	if p == nil {
		t.Fatal("no sends path")
	}
	var out [][2]float64
	for _, m := range regexp.MustCompile(`M([-0-9.]+) ([-0-9.]+)h0`).FindAllStringSubmatch(p.attrs["d"], -1) {
		out = append(out, [2]float64{atof(t, m[1]), atof(t, m[2])})
	}
	return out
}

func render(t *testing.T, c *Chart) *node {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	return parse(t, b.Bytes())
}

func near(a, b float64) bool { return math.Abs(a-b) <= 0.1 }

func TestTheSVGIsWellFormedWhateverTheTitleSays(t *testing.T) {
	t.Parallel()
	title := `fairness: tenant "A" & <B>, PostgreSQL`
	svg := render(t, &Chart{
		Title: title, Subtitle: "p99 < 250 ms & max > 1 s",
		Sends:   []Send{{At: time.Second, Latency: 3 * time.Millisecond}},
		Backlog: []Count{{At: 0, N: 5}, {At: 2 * time.Second, N: 0}}, BacklogLabel: "A's <backlog>",
		Aim: 250 * time.Millisecond, Marks: []Mark{{At: time.Second, Label: "B & A"}},
		Note: "load < 2 & rising",
	})
	texts := svg.all(func(n *node) bool { return n.name == "text" && n.text == title })
	if len(texts) != 1 {
		t.Fatalf("the title %q is not one text element", title)
	}
}

func TestPointsLandWhereTheScalesSay(t *testing.T) {
	t.Parallel()
	svg := render(t, &Chart{
		Title: "t",
		Sends: []Send{
			{At: 10 * time.Second, Latency: 100 * time.Millisecond},
			{At: 20 * time.Second, Latency: time.Second},
			{At: 5 * time.Second, Latency: 0},
			{At: 30 * time.Second, Latency: 10 * time.Millisecond},
		},
		Backlog:      []Count{{At: 0, N: 20_000}, {At: 10 * time.Second, N: 10_000}, {At: 30 * time.Second, N: 0}},
		BacklogLabel: "backlog",
		Aim:          250 * time.Millisecond,
	})
	left, right, bottom := ticks(t, svg, "latency-axis"), ticks(t, svg, "backlog-axis"), ticks(t, svg, "time-axis")
	for _, want := range []struct {
		m     map[string][2]float64
		label string
	}{{left, "0.1 ms"}, {left, "10 ms"}, {left, "100 ms"}, {left, "1 s"}, {right, "0"}, {right, "10,000"}, {right, "20,000"}, {bottom, "0 s"}, {bottom, "10 s"}, {bottom, "30 s"}} {
		if _, ok := want.m[want.label]; !ok {
			t.Fatalf("no tick %q in %v", want.label, want.m)
		}
	}
	if _, ok := left["10 s"]; ok {
		t.Errorf("the latency axis goes a decade past the data: %v", left)
	}

	// The axes span the plot: the first and last ticks on its edges, the
	// decades evenly spaced, the counts linear.
	frame := svg.class("plot")
	if frame == nil {
		t.Fatal("no plot frame")
	}
	x0, y0 := atof(t, frame.attrs["x"]), atof(t, frame.attrs["y"])
	x1, y1 := x0+atof(t, frame.attrs["width"]), y0+atof(t, frame.attrs["height"])
	for _, e := range []struct {
		what      string
		got, want float64
	}{
		{"0.1 ms", left["0.1 ms"][1], y1}, {"1 s", left["1 s"][1], y0},
		{"10 ms", left["10 ms"][1], (left["0.1 ms"][1] + left["1 s"][1]) / 2},
		{"count 0", right["0"][1], y1}, {"20,000", right["20,000"][1], y0},
		{"10,000", right["10,000"][1], (y0 + y1) / 2},
		{"0 s", bottom["0 s"][0], x0}, {"30 s", bottom["30 s"][0], x1},
		{"10 s", bottom["10 s"][0], x0 + (x1-x0)/3},
	} {
		if !near(e.got, e.want) {
			t.Errorf("tick %s at %.1f, want %.1f (plot %v–%v × %v–%v)", e.what, e.got, e.want, x0, x1, y0, y1)
		}
	}

	d := dots(t, svg)
	if len(d) != 4 {
		t.Fatalf("%d dots, want 4", len(d))
	}
	for i, want := range [][2]float64{
		{bottom["10 s"][0], left["100 ms"][1]},
		{bottom["20 s"][0], left["1 s"][1]},
		{(bottom["0 s"][0] + bottom["10 s"][0]) / 2, left["0.1 ms"][1]}, // below the axis: at its bottom
		{bottom["30 s"][0], left["10 ms"][1]},
	} {
		if !near(d[i][0], want[0]) || !near(d[i][1], want[1]) {
			t.Errorf("send %d drawn at %v, its ticks say %v", i, d[i], want)
		}
	}

	line := svg.class("backlog")
	if line == nil {
		t.Fatal("no backlog line")
	}
	var vertices [][2]float64
	for _, xy := range strings.Fields(line.attrs["points"]) {
		x, y, _ := strings.Cut(xy, ",")
		vertices = append(vertices, [2]float64{atof(t, x), atof(t, y)})
	}
	for i, want := range [][2]float64{
		{bottom["0 s"][0], right["20,000"][1]},
		{bottom["10 s"][0], right["10,000"][1]},
		{bottom["30 s"][0], right["0"][1]},
	} {
		if i >= len(vertices) || !near(vertices[i][0], want[0]) || !near(vertices[i][1], want[1]) {
			t.Errorf("backlog sample %d drawn at %v, its ticks say %v", i, vertices, want)
		}
	}

	aim := svg.class("aim")
	if aim == nil {
		t.Fatal("no aim line")
	}
	// 250 ms is log10(2.5) of the way from the 100 ms decade to the 1 s one.
	want := left["100 ms"][1] + (left["1 s"][1]-left["100 ms"][1])*math.Log10(2.5)
	if y := atof(t, aim.attrs["y1"]); !near(y, want) || aim.attrs["y2"] != aim.attrs["y1"] {
		t.Errorf("aim line at y %s–%s, want %.1f", aim.attrs["y1"], aim.attrs["y2"], want)
	}
}

func TestTheAxesCoverTheData(t *testing.T) {
	t.Parallel()
	svg := render(t, &Chart{
		Sends:   []Send{{At: 37 * time.Second, Latency: 14300 * time.Millisecond}, {At: 1, Latency: 4 * time.Millisecond}},
		Backlog: []Count{{At: 0, N: 173_000}, {At: 41 * time.Second, N: 90_000}},
	})
	left, right, bottom := ticks(t, svg, "latency-axis"), ticks(t, svg, "backlog-axis"), ticks(t, svg, "time-axis")
	for _, want := range []struct {
		m     map[string][2]float64
		label string
	}{{left, "1 ms"}, {left, "100 s"}, {right, "200,000"}, {bottom, "45 s"}} {
		if _, ok := want.m[want.label]; !ok {
			t.Errorf("no tick %q in %v", want.label, want.m)
		}
	}
	for i, d := range dots(t, svg) {
		if d[0] < plotLeft || d[0] > plotRight || d[1] < plotTop || d[1] > plotBottom {
			t.Errorf("send %d drawn at %v, outside the plot", i, d)
		}
	}
	if svg.class("aim") != nil {
		t.Error("an aim line drawn for a chart without an aim")
	}
}
