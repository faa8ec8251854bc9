package replay

import (
	"fmt"
	"html/template"
	"io"
	"time"
)

// WriteHTML writes the report as one self-contained HTML page: the
// summary, a plot per rule of its requests matched and limited per minute
// (inline SVG), the tables of the text report, the comparison and the
// notes. It loads nothing: no script, style sheet, font or image from
// anywhere, and its Content-Security-Policy forbids any.
func WriteHTML(w io.Writer, rep *Report) error {
	page := htmlPage{Report: rep}
	for i := range rep.Rules {
		page.Plots = append(page.Plots, plotOf(&rep.Rules[i], rep.From, rep.To))
	}
	return pageTemplate.Execute(w, page)
}

type htmlPage struct {
	*Report
	Plots []plot
}

// plot is one rule's plot: bars of the requests matched and limited in
// each column of time.
type plot struct {
	Rule          string
	Width, Height int
	Bars          []bar
	MaxCount      int64
	From, To      string
	Limited       int64
	Title         string
}

type bar struct {
	X, W             float64
	MatchedY, MatchH float64
	LimitY, LimitH   float64
	Label            string
}

// plotColumns is the most columns of a plot: minutes are added up into
// columns when a log spans more.
const plotColumns = 600

const (
	plotW, plotH = 900, 180
	plotLeft     = 50 // room for the counts
	plotBottom   = 20 // room for the times
)

func plotOf(r *RuleReport, from, to time.Time) plot {
	p := plot{Rule: r.Rule, Width: plotW, Height: plotH, Limited: r.Limited,
		From: from.Format("2006-01-02 15:04 UTC"), To: to.Format("2006-01-02 15:04 UTC")}
	p.Title = fmt.Sprintf("%s: requests matched (grey) and limited (red) per minute", r.Rule)
	start := from.Truncate(time.Minute)
	minutes := int(to.Sub(start)/time.Minute) + 1
	perCol := max(1, (minutes+plotColumns-1)/plotColumns)
	cols := (minutes + perCol - 1) / perCol
	if cols <= 0 || len(r.PerMinute) == 0 {
		return p
	}
	matched := make([]int64, cols)
	limited := make([]int64, cols)
	for _, m := range r.PerMinute {
		c := int(m.Minute.Sub(start)/time.Minute) / perCol
		if c < 0 || c >= cols {
			continue
		}
		matched[c] += m.Matched
		limited[c] += m.Limited
	}
	for _, n := range matched {
		p.MaxCount = max(p.MaxCount, n)
	}
	if p.MaxCount == 0 {
		return p
	}
	innerW, innerH := float64(plotW-plotLeft), float64(plotH-plotBottom)
	w := innerW / float64(cols)
	for c := range cols {
		if matched[c] == 0 {
			continue
		}
		mh := innerH * float64(matched[c]) / float64(p.MaxCount)
		lh := innerH * float64(limited[c]) / float64(p.MaxCount)
		at := start.Add(time.Duration(c*perCol) * time.Minute)
		p.Bars = append(p.Bars, bar{X: plotLeft + float64(c)*w, W: max(w-0.5, 0.5), MatchedY: innerH - mh, MatchH: mh, LimitY: innerH - lh, LimitH: lh,
			Label: fmt.Sprintf("%s: %d matched, %d limited", at.Format("15:04"), matched[c], limited[c])})
	}
	return p
}

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"seconds": seconds,
	"percent": percent,
	"time":    func(t time.Time) string { return t.Format("2006-01-02 15:04:05 UTC") },
	"sub":     func(a, b int) int { return a - b },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sluice replay: {{.Config}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1b1f24; max-width: 960px; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; margin: .5rem 0; } th, td { padding: .2rem .6rem; text-align: right; border-bottom: 1px solid #eaeef2; }
th:first-child, td:first-child { text-align: left; } td.key { text-align: left; font-family: ui-monospace, monospace; }
.summary { color: #57606a; } .note { color: #9a6700; }
svg.plot { display: block; margin: .5rem 0; } .matched { fill: #afb8c1; } .limited { fill: #cf222e; } .axis { stroke: #57606a; }
svg text { font-size: 11px; fill: #57606a; }
</style>
</head>
<body>
<h1>Sluice replay of {{range $i, $l := .Logs}}{{if $i}}, {{end}}{{$l}}{{end}} with {{.Config}}</h1>
<p class="summary" id="summary">{{.Requests}} requests from {{.Lines}} lines ({{.Format}}){{if .Requests}}, {{time .From}} to {{time .To}}{{end}}.
Limited (429): <b>{{.Limited}}</b>; delayed: {{.Delayed}}; denied (403): {{.Denied}}; matched by no rule: {{.Unmatched}}.
{{if .Unparsed}}Not replayed: {{.Unparsed}} lines{{range .UnparsedReasons}}; {{.Reason}}: {{.Lines}}{{end}}.{{end}}
{{if .Late}}Late: {{.Late}} requests logged more than {{.ToleranceSeconds}}s out of order.{{end}}</p>
{{range .ReadErrors}}<p class="note">Read error: {{.}} (replayed up to it)</p>{{end}}
<table id="rules">
<tr><th>rule</th><th>action</th><th>matched</th><th>admitted</th><th>limited</th><th>delayed</th><th>max delay</th><th>skipped</th><th>clients</th><th>clients limited</th></tr>
{{range .Rules}}<tr><td>{{.Rule}}</td><td>{{.Action}}</td><td>{{.Matched}}</td><td>{{.Admitted}}</td><td>{{.Limited}}</td><td>{{.Delayed}}</td><td>{{seconds .MaxDelaySeconds}}</td><td>{{.Skipped}}</td><td>{{.Clients}}</td><td>{{.ClientsLimited}}</td></tr>
{{end}}</table>
{{range $i, $r := .Rules}}{{$p := index $.Plots $i}}
<section class="rule" id="rule-{{$r.Rule}}" data-rule="{{$r.Rule}}">
<h2>{{$r.Rule}} <small>({{$r.Action}})</small></h2>
<svg class="plot" data-rule="{{$r.Rule}}" width="{{$p.Width}}" height="{{$p.Height}}" viewBox="0 0 {{$p.Width}} {{$p.Height}}" role="img" aria-label="{{$p.Title}}">
<title>{{$p.Title}}</title>
<line class="axis" x1="50" y1="{{sub $p.Height 20}}" x2="{{$p.Width}}" y2="{{sub $p.Height 20}}"/>
<line class="axis" x1="50" y1="0" x2="50" y2="{{sub $p.Height 20}}"/>
<text x="45" y="10" text-anchor="end">{{$p.MaxCount}}</text><text x="45" y="{{sub $p.Height 22}}" text-anchor="end">0</text>
<text x="50" y="{{sub $p.Height 5}}">{{$p.From}}</text><text x="{{$p.Width}}" y="{{sub $p.Height 5}}" text-anchor="end">{{$p.To}}</text>
{{range $p.Bars}}<g><title>{{.Label}}</title><rect class="matched" x="{{.X}}" y="{{.MatchedY}}" width="{{.W}}" height="{{.MatchH}}"/>{{if .LimitH}}<rect class="limited" x="{{.X}}" y="{{.LimitY}}" width="{{.W}}" height="{{.LimitH}}"/>{{end}}</g>
{{end}}</svg>
{{if $r.Top}}<table class="top"><tr><th>most limited clients</th><th>limited</th><th>requests</th></tr>
{{range $r.Top}}<tr><td class="key">{{.Key}}</td><td>{{.Limited}}</td><td>{{.Requests}}</td></tr>
{{end}}</table>{{end}}
{{with $r.Suggest}}<p class="suggest">Peak requests per {{seconds .PeriodSeconds}} per client ({{.Clients}} clients): p50 {{.P50}}, p90 {{.P90}}, p99 {{.P99}}, p99.9 {{.P999}}, max {{.Max}}.
A limit of <b>{{.Limit}}</b> per {{seconds .PeriodSeconds}} limits {{.ClientsOverLimit}} clients (at most {{percent .MaxClientsLimited}}); the rule's {{.CurrentLimit}} limits {{.ClientsOverCurrent}}.</p>{{end}}
</section>{{end}}
{{with .Against}}<h2 id="against">Against {{.Config}}</h2>
<p>The old configuration limited {{.Limited}} requests. Clients limited now and not before: {{.NewlyLimitedCount}}; limited before and not now: {{.NoLongerLimitedCount}}.</p>
<table><tr><th>client</th><th>limited now</th></tr>{{range .NewlyLimited}}<tr><td class="key">{{.Client}}</td><td>{{.Limited}}</td></tr>{{end}}</table>
<table><tr><th>client</th><th>limited before</th></tr>{{range .NoLongerLimited}}<tr><td class="key">{{.Client}}</td><td>{{.Limited}}</td></tr>{{end}}</table>
<table><tr><th>rule</th><th>in</th><th>keys newly limited</th><th>keys no longer limited</th></tr>
{{range .Rules}}<tr><td>{{.Rule}}</td><td>{{.In}}</td><td>{{.NewlyLimitedCount}}</td><td>{{.NoLongerLimitedCount}}</td></tr>{{end}}</table>{{end}}
{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li class="note">{{.}}</li>{{end}}</ul>{{end}}
{{if .UnparsedLines}}<h2>Lines not replayed</h2><table id="unparsed"><tr><th>log</th><th>line</th><th>why</th></tr>
{{range .UnparsedLines}}<tr><td>{{.Log}}</td><td>{{.Line}}</td><td>{{.Reason}}</td></tr>{{end}}</table>{{end}}
</body>
</html>
`))
