package admin

// This file draws the status page's ring picture: its geometry, the
// upstreams' colours and the SVG paths of their arcs.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ringSamples is how many evenly spaced positions of the circle the page
// samples to draw the ring: a quarter of a degree each. With the default
// 160 points per weight a few upstreams own arcs well below a degree, so
// the picture shows how finely the ring interleaves them, not every point.
const ringSamples = 1440

// Ring geometry, in SVG user units: the ring is a band of width ringWidth
// centred on a circle of radius ringRadius around (ringCentre, ringCentre).
const (
	ringCentre = 150.0
	ringRadius = 104.0
	ringWidth  = 46.0
)

// greyColor draws unavailable upstreams; it is not in palette.
const greyColor = "#c8c8c8"

// palette holds distinct colours for the first upstreams (Tableau 10,
// without its grey, reordered so neighbours in name order contrast);
// further upstreams get hues a golden angle apart.
var palette = []string{
	"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948",
	"#76b7b2", "#e15759", "#9c755f", "#ff9da7",
}

// upstreamColor is the colour of the upstream at index i.
func upstreamColor(i int) string {
	if i < len(palette) {
		return palette[i]
	}
	return fmt.Sprintf("hsl(%d, 55%%, 50%%)", (i*137)%360)
}

// ringGeometry is where the ring picture's parts go (see ringCentre): the
// SVG's size, the circle the arcs are stroked on, the band's inner edge,
// the key marker's ends and the centre text's baselines.
type ringGeometry struct {
	Size, Centre, Radius, Width, InnerR float64
	MarkerTop, MarkerBottom             float64
	CountY, LabelY                      float64
}

// geometry is the ring picture's layout, the same for every section.
var geometry = ringGeometry{
	Size:         2 * ringCentre,
	Centre:       ringCentre,
	Radius:       ringRadius,
	Width:        ringWidth,
	InnerR:       ringRadius - ringWidth/2,
	MarkerTop:    ringCentre - ringRadius - ringWidth/2 - 10,
	MarkerBottom: ringCentre - ringRadius + ringWidth/2 + 10,
	CountY:       ringCentre - 4,
	LabelY:       ringCentre + 18,
}

// arcPath returns SVG path data drawing the samples owned by member as
// annular sectors of the ring's band: one closed subpath per run of
// consecutive owned samples (a run through the top is two), clockwise from
// the top, sample i covering the angles [i, i+1) × 360° / len(owners).
// Each sector is outer arc, line in, inner arc back, close: filled shapes
// that abut exactly, where dashes on a stroked circle leave seams and
// bleed into the hole at some zoom levels.
func arcPath(owners []int, member int) string {
	n := len(owners)
	var b strings.Builder
	for i := 0; i < n; {
		if owners[i] != member {
			i++
			continue
		}
		j := i
		for j < n && owners[j] == member {
			j++
		}
		if j-i == n { // the whole circle: two halves (an arc cannot end where it starts)
			sector(&b, 0, n/2, n)
			sector(&b, n/2, n, n)
		} else {
			sector(&b, i, j, n)
		}
		i = j
	}
	return strings.TrimSpace(b.String())
}

// sector appends the annular sector of samples [from, to) out of n.
func sector(b *strings.Builder, from, to, n int) {
	const outer, inner = ringRadius + ringWidth/2, ringRadius - ringWidth/2
	a0 := 2 * math.Pi * float64(from) / float64(n)
	a1 := 2 * math.Pi * float64(to) / float64(n)
	large := 0
	if a1-a0 > math.Pi {
		large = 1
	}
	pt := func(r, a float64) string {
		return strconv.FormatFloat(ringCentre+r*math.Sin(a), 'f', 2, 64) + " " +
			strconv.FormatFloat(ringCentre-r*math.Cos(a), 'f', 2, 64)
	}
	fmt.Fprintf(b, "M%s A%g %g 0 %d 1 %s L%s A%g %g 0 %d 0 %s Z ",
		pt(outer, a0), outer, outer, large, pt(outer, a1), pt(inner, a1), inner, inner, large, pt(inner, a0))
}
