package main

import (
	"bytes"
	"fmt"
	"html"
	"sort"

	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
)

// renderSVG draws each timeline as a panel: one lane per member, its act spans as bars, its
// leadership events as ticks, and the fault or signal at t0 as a red line.
func renderSVG(rep *Report) []byte {
	const (
		width  = 960
		left   = 110
		right  = 20
		laneH  = 22
		top    = 40
		bottom = 30
	)
	var body bytes.Buffer
	y := 10
	for _, tl := range rep.Timelines {
		lanes := map[string]int{}
		var names []string
		lo, hi := tl.From, tl.To
		for _, l := range tl.Lines {
			if _, ok := lanes[l.Name]; !ok {
				lanes[l.Name] = 0
				names = append(names, l.Name)
			}
		}
		sort.Strings(names)
		for i, n := range names {
			lanes[n] = i
		}
		if hi == lo {
			hi = lo + 1
		}
		x := func(t int64) float64 {
			t = max(lo, min(t, hi))
			return left + float64(t-lo)/float64(hi-lo)*float64(width-left-right)
		}
		h := top + len(names)*laneH + bottom
		fmt.Fprintf(&body, `<g transform="translate(0,%d)">`+"\n", y)
		fmt.Fprintf(&body, `<text x="10" y="20" font-weight="bold">%s</text>`+"\n", html.EscapeString(tl.Title))
		for i, n := range names {
			ly := top + i*laneH
			fmt.Fprintf(&body, `<text x="10" y="%d">%s</text>`+"\n", ly+15, html.EscapeString(n))
			fmt.Fprintf(&body, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`+"\n", left, ly+laneH/2, width-right, ly+laneH/2)
		}
		for _, l := range tl.Lines {
			ly := top + lanes[l.Name]*laneH
			switch l.Event {
			case member.EventAct:
				w := max(x(l.To)-x(l.From), 1)
				fmt.Fprintf(&body, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#2a9d3a"><title>%s leads</title></rect>`+"\n",
					x(l.From), ly+4, w, laneH-8, html.EscapeString(l.Name))
			case member.EventAcquired, member.EventFenced, member.EventRevoked, member.EventStarted, member.EventClosed,
				fleet.EventExit, fleet.EventSpawned, evHeal:
				color := map[string]string{member.EventAcquired: "#1f5fbf", member.EventFenced: "#e07b00",
					member.EventRevoked: "#7b3fbf", fleet.EventExit: "#000", evHeal: "#2a9d3a"}[l.Event]
				if color == "" {
					color = "#999"
				}
				fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"><title>%s %s %s</title></line>`+"\n",
					x(l.At), ly+1, x(l.At), ly+laneH-1, color, html.EscapeString(l.Name), l.Event, html.EscapeString(l.Info))
			}
		}
		fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="red" stroke-dasharray="4 3"/>`+"\n",
			x(tl.T0), top-6, x(tl.T0), top+len(names)*laneH)
		for _, l := range tl.Lines {
			if l.At == tl.T0 && (l.Event == fleet.EventSigterm || l.Event == fleet.EventSigkill || l.Event == evCut) {
				fmt.Fprintf(&body, `<text x="%.1f" y="%d" font-size="10" fill="red">%s %s</text>`+"\n",
					x(tl.T0)+3, top-8, l.Event, html.EscapeString(l.Name))
			}
		}
		// Ticks labelled relative to t0, about a dozen of them.
		step := int64(500e6)
		for (hi-lo)/step > 14 {
			step *= 2
		}
		for t := lo - (lo-tl.T0)%step; t <= hi; t += step {
			if t < lo {
				continue
			}
			ly := top + len(names)*laneH
			fmt.Fprintf(&body, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#666"/>`+"\n", x(t), ly, x(t), ly+4)
			fmt.Fprintf(&body, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%+.1fs</text>`+"\n",
				x(t), ly+16, float64(t-tl.T0)/1e9)
		}
		body.WriteString("</g>\n")
		y += h
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, y+10)
	fmt.Fprintf(&out, `<text x="10" y="%d" font-size="10" fill="#555">green: acting as leader; blue: acquired; orange: fenced; purple: revoked; black: process ended; red dashes: the fault</text>`+"\n", y+5)
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes()
}
