package svgchart

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func chart(panels int) *Chart {
	c := &Chart{
		Title:          `A <chart> & "quotes"`,
		XLabel:         "time (s)",
		YLabel:         "requests per 100ms",
		XStep:          0.1,
		Series:         []Series{{"admitted", "#3a78b5"}, {"refused", "#f0a04b"}},
		Reference:      1,
		ReferenceLabel: "the rate",
	}
	for p := range panels {
		c.Panels = append(c.Panels, Panel{
			Title:  "panel " + string(rune('A'+p)),
			Values: [][]float64{{1, 0, 2, 0.5}, {0, 0, 1, 3}},
		})
	}
	return c
}

// element is an SVG element as encoding/xml reads it, children included.
type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []element  `xml:",any"`
}

func (e element) attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// walk calls f on e and every element under it.
func (e element) walk(f func(element)) {
	f(e)
	for _, c := range e.Children {
		c.walk(f)
	}
}

func TestWriteSVG(t *testing.T) {
	for _, panels := range []int{1, 3, 5} {
		var buf bytes.Buffer
		if err := chart(panels).WriteSVG(&buf); err != nil {
			t.Fatal(err)
		}
		var root element
		if err := xml.Unmarshal(buf.Bytes(), &root); err != nil {
			t.Fatalf("%d panels: not XML: %v\n%s", panels, err, buf.String())
		}
		if root.XMLName.Space != "http://www.w3.org/2000/svg" || root.XMLName.Local != "svg" {
			t.Fatalf("root %v, want svg in the SVG namespace", root.XMLName)
		}
		var groups, bars int
		var texts []string
		root.walk(func(e element) {
			switch e.XMLName.Local {
			case "g":
				if e.attr("class") == "panel" {
					groups++
				}
			case "rect":
				if e.attr("fill") == "#3a78b5" || e.attr("fill") == "#f0a04b" {
					bars++
				}
			case "text", "title":
				texts = append(texts, e.Text)
			}
		})
		if groups != panels {
			t.Errorf("%d panel groups, want %d", groups, panels)
		}
		// Non-zero values: 3 admitted and 2 refused per panel, plus the two
		// legend swatches.
		if want := 5*panels + 2; bars != want {
			t.Errorf("%d coloured rects, want %d", bars, want)
		}
		all := strings.Join(texts, "|")
		for _, want := range []string{`A <chart> & "quotes"`, "time (s)", "requests per 100ms", "admitted", "refused", "the rate", "panel A", "0.4"} {
			if !strings.Contains(all, want) {
				t.Errorf("no text %q in %q", want, all)
			}
		}
	}
}

// A stacked bar is as tall as its total: bars of 2+1 and of 0.5+3 reach the
// same scale as the y ticks.
func TestBarHeights(t *testing.T) {
	var buf bytes.Buffer
	c := chart(1)
	c.PanelHeight = 100
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	// The y scale tops at 4 (3.5 rounded up to a step of 1): 25px a unit.
	for _, want := range []string{`height="50" fill="#3a78b5"`, `height="25" fill="#f0a04b"`, `height="75" fill="#f0a04b"`, `height="12.5" fill="#3a78b5"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no bar with %s", want)
		}
	}
}

func TestWriteSVGErrors(t *testing.T) {
	for name, mod := range map[string]func(*Chart){
		"no panels":      func(c *Chart) { c.Panels = nil },
		"no series":      func(c *Chart) { c.Series = nil },
		"zero step":      func(c *Chart) { c.XStep = 0 },
		"missing series": func(c *Chart) { c.Panels[0].Values = c.Panels[0].Values[:1] },
		"ragged":         func(c *Chart) { c.Panels[1].Values[0] = []float64{1} },
		"negative":       func(c *Chart) { c.Panels[0].Values[1][2] = -1 },
		"no buckets":     func(c *Chart) { c.Panels = []Panel{{Values: [][]float64{{}, {}}}} },
	} {
		c := chart(2)
		mod(c)
		if err := c.WriteSVG(io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct {
		span  float64
		parts int
		want  float64
	}{{10, 10, 1}, {10, 4, 5}, {3.5, 4, 1}, {600, 10, 100}, {0.4, 4, 0.1}, {0, 4, 1}, {17, 4, 5}} {
		if got := niceStep(tc.span, tc.parts); got != tc.want {
			t.Errorf("niceStep(%v, %d) = %v, want %v", tc.span, tc.parts, got, tc.want)
		}
	}
	// Counts tick on whole numbers.
	c := chart(1)
	c.Panels[0].Values = [][]float64{{2, 0, 0, 0}, {0, 0, 0, 0}}
	c.Reference, c.IntegerY = 0.5, true
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, ">0.5</text>") || !strings.Contains(s, ">3</text>") {
		t.Errorf("IntegerY: ticks of %s", s)
	}
	if got := tick(0.30000000000000004, 0.1); got != "0.3" {
		t.Errorf("tick = %q", got)
	}
}
