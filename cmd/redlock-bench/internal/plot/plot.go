// Package plot draws a report's acquire-latency percentiles as a bar chart
// on a log axis, into an SVG or PNG file.
package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	gonum "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// percentileSeries are the bars of each group, light to dark so that the
// tail reads as the heavier colour.
var percentileSeries = []struct {
	name  string
	value func(report.Row) float64
	color color.Color
}{
	{"p50", func(r report.Row) float64 { return r.AcquireP50Us }, color.RGBA{0x9e, 0xca, 0xe1, 0xff}},
	{"p90", func(r report.Row) float64 { return r.AcquireP90Us }, color.RGBA{0x4f, 0x9b, 0xd0, 0xff}},
	{"p99", func(r report.Row) float64 { return r.AcquireP99Us }, color.RGBA{0x21, 0x66, 0xac, 0xff}},
	{"p99.9", func(r report.Row) float64 { return r.AcquireP999Us }, color.RGBA{0x08, 0x30, 0x6b, 0xff}},
}

// ErrFormat reports a file extension other than .svg and .png.
var ErrFormat = errors.New("plot: unknown file format")

// Draw draws the acquire-latency percentiles of every row of r into path,
// as .svg or .png by its extension (another extension returns an error
// wrapping [ErrFormat]). Rows without attempts are left out; a report with
// none left is an error, since an empty chart would pass for a result.
func Draw(path string, r *report.Report) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("%w %q for %s (want .svg or .png)", ErrFormat, ext, path)
	}
	var rows []report.Row
	if r != nil {
		for _, row := range r.Results {
			if row.AcquireP50Us > 0 {
				rows = append(rows, row)
			}
		}
	}
	if len(rows) == 0 {
		return errors.New("plot: no row has acquire latencies to draw")
	}

	p := gonum.New()
	p.Title.Text = plotTitle(r, rows)
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(10)
	// No Y label: gonum sizes a rotated axis label as if it stood upright
	// on a log axis and pushes the data down by a third of the page. The
	// tick labels carry their unit, and the title says "log scale".
	p.Y.Scale = gonum.LogScale{}
	p.Y.Tick.Marker = durationLogTicks{}
	p.Y.Tick.Label.Font.Size = vg.Points(12)
	p.X.Tick.Label.Font.Size = vg.Points(12)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.TextStyle.Font.Size = vg.Points(12)
	p.Legend.ThumbnailWidth = vg.Points(14)
	p.Legend.Padding = vg.Points(2)

	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal.Color = color.Gray{Y: 0xc8}
	p.Add(grid)

	slot := groupSlot(len(rows))
	legendH := vg.Length(len(percentileSeries)) * (p.Legend.TextStyle.Height("p99.9") + p.Legend.Padding)
	legendW := p.Legend.XOffs + p.Legend.ThumbnailWidth + p.Legend.TextStyle.Width(" p99.9")
	under := min(len(rows), int(legendW/slot)+1)
	p.Y.Min, p.Y.Max = yRange(rows, under, float64(legendH/(plotHeight*0.75)))

	const groupWidth = 0.8 // of the distance between two rows
	barWidth := slot * groupWidth / vg.Length(len(percentileSeries))
	for i, s := range percentileSeries {
		b := &logBars{width: barWidth, color: s.color}
		b.offset = (vg.Length(i) - vg.Length(len(percentileSeries)-1)/2) * barWidth
		for _, row := range rows {
			b.values = append(b.values, s.value(row))
		}
		p.Add(b)
		p.Legend.Add(s.name, b)
	}

	labels := report.Labels(rows, true)
	// Labels wider than their group would run into each other; tilted,
	// each keeps its own space, and one line reads better than two.
	if widest(p.X.Tick.Label, labels) > slot*0.95 {
		for i := range labels {
			labels[i] = strings.ReplaceAll(labels[i], "\n", " ")
		}
		p.X.Tick.Label.Rotation = math.Pi / 4
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	p.NominalX(labels...)
	p.X.Label.Text = labelKey(rows, labels)
	p.X.Label.TextStyle.Font.Size = vg.Points(11)

	canvas, err := draw.NewFormattedCanvas(plotWidth, plotHeight, ext[1:])
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	// gonum draws the outermost bars and labels flush with the page edge.
	margin := vg.Points(6)
	p.Draw(draw.Crop(draw.New(canvas), margin, -2*margin, margin, -margin))
	// Rendered in memory first, so a failure does not leave half a file.
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

const (
	plotWidth  = 10 * vg.Inch
	plotHeight = 6 * vg.Inch
)

// groupSlot estimates the distance between two rows on the page, which bar
// widths must be given in. It need not be exact: the plot's own padding
// only takes a little of the width.
func groupSlot(rows int) vg.Length {
	return (plotWidth - vg.Inch) / vg.Length(rows)
}

func widest(sty text.Style, labels []string) vg.Length {
	var w vg.Length
	for _, l := range labels {
		for line := range strings.SplitSeq(l, "\n") {
			w = max(w, sty.Width(line))
		}
	}
	return w
}

// yRange rounds the latencies of rows out to whole decades. The legend
// sits in the top left corner, over the first under rows, and covers the
// fraction legend of the axis height: decades are added on top until those
// rows' bars stay below it, rather than hiding the legend or the bars.
func yRange(rows []report.Row, under int, legend float64) (lo, hi float64) {
	lo, hi = math.Inf(1), 0.0
	var first float64 // the tallest bar under the legend
	for i, row := range rows {
		for _, s := range percentileSeries {
			if v := s.value(row); v > 0 {
				lo, hi = min(lo, v), max(hi, v)
				if i < under {
					first = max(first, v)
				}
			}
		}
	}
	bottom := math.Floor(math.Log10(lo))
	if math.Pow(10, bottom) >= lo { // a bar as tall as the floor is no bar
		bottom--
	}
	top := max(math.Ceil(math.Log10(hi)), bottom+1)
	for extra := 0; extra < 3 && math.Log10(first) > top-(top-bottom)*legend; extra++ {
		top++
	}
	return math.Pow(10, bottom), math.Pow(10, top)
}

// labelKey spells out the abbreviations the labels use, and only those.
func labelKey(rows []report.Row, labels []string) string {
	var key []string
	switch {
	case slices.ContainsFunc(rows, func(r report.Row) bool { return r.Scenario == "choose" }):
		// The options of `redlock-bench choose` run on Redis masters, etcd members, one PostgreSQL.
		key = append(key, "Nm: N servers")
	case slices.ContainsFunc(rows, func(r report.Row) bool { return r.Mode != "single" }):
		key = append(key, "Nm: N masters")
	}
	if slices.ContainsFunc(labels, func(l string) bool { return strings.Contains(l, "c=") }) {
		key = append(key, "c: goroutines sharing one client")
	}
	if slices.ContainsFunc(labels, func(l string) bool { return strings.Contains(l, "k=") }) {
		key = append(key, "k: keys the locks are spread over")
	}
	return strings.Join(key, "    ")
}

func plotTitle(r *report.Report, rows []report.Row) string {
	var scenarios []string
	for _, row := range rows {
		if !slices.Contains(scenarios, row.Scenario) {
			scenarios = append(scenarios, row.Scenario)
		}
	}
	noun := "scenario"
	if len(scenarios) > 1 {
		noun = "scenarios"
	}
	return fmt.Sprintf("Lock acquire latency by percentile (log scale)\n%s backend, %s %s",
		r.Backend, noun, strings.Join(scenarios, ", "))
}

// logBars draws bars up from the bottom of a log-scaled Y axis.
// plotter.BarChart cannot: it starts every bar at zero, which a log scale
// has no place for.
type logBars struct {
	values []float64 // one per row; values <= 0 are not drawn
	width  vg.Length
	offset vg.Length // from the row's centre, to place this bar in its group
	color  color.Color
}

func (b *logBars) Plot(c draw.Canvas, p *gonum.Plot) {
	trX, trY := p.Transforms(&c)
	for i, v := range b.values {
		if v <= 0 {
			continue
		}
		x := trX(float64(i)) + b.offset
		bottom, top := trY(p.Y.Min), trY(min(v, p.Y.Max))
		rect := []vg.Point{
			{X: x - b.width/2, Y: bottom},
			{X: x - b.width/2, Y: top},
			{X: x + b.width/2, Y: top},
			{X: x + b.width/2, Y: bottom},
		}
		c.FillPolygon(b.color, c.ClipPolygonY(rect))
	}
}

func (b *logBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, v := range b.values {
		if v > 0 {
			ymin, ymax = min(ymin, v), max(ymax, v)
		}
	}
	return 0, float64(len(b.values) - 1), ymin, ymax
}

// GlyphBoxes keeps the outer bars of the first and last group inside the
// plot's padding.
func (b *logBars) GlyphBoxes(p *gonum.Plot) []gonum.GlyphBox {
	boxes := make([]gonum.GlyphBox, len(b.values))
	for i := range b.values {
		boxes[i].X = p.X.Norm(float64(i))
		boxes[i].Rectangle = vg.Rectangle{
			Min: vg.Point{X: b.offset - b.width/2},
			Max: vg.Point{X: b.offset + b.width/2},
		}
	}
	return boxes
}

func (b *logBars) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.color, c.ClipPolygonY([]vg.Point{
		{X: c.Min.X, Y: c.Min.Y},
		{X: c.Min.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Min.Y},
	}))
}

// durationLogTicks labels a log axis of microseconds as durations (100µs,
// 1ms, 1s): a reader compares against a TTL or a node timeout, which are
// durations, and "100000" has too many zeros to count at a glance.
type durationLogTicks struct{}

func (durationLogTicks) Ticks(lo, hi float64) []gonum.Tick {
	ticks := gonum.LogTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = (time.Duration(ticks[i].Value * float64(time.Microsecond))).String()
		}
	}
	return ticks
}
