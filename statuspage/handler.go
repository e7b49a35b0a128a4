package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServeHTTP serves the page. Mount it like net/http/pprof:
//
//	mux.Handle("/debug/informers/", page)
//
// Below that prefix it answers:
//
//	/debug/informers/         the HTML page (server-rendered, no JavaScript, reloads itself; ?refresh=N seconds, 0 = never)
//	/debug/informers/?format=json, /debug/informers/json   the same as JSON (Status)
//	/debug/informers/readyz   readiness (ReadyHandler)
//	/debug/informers/livez    liveness (LiveHandler)
//
// Only GET and HEAD are allowed.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	last := path[strings.LastIndexByte(path, '/')+1:]
	switch {
	case last == "readyz":
		p.serveHealth(w, r, true)
	case last == "livez":
		p.serveHealth(w, r, false)
	case last == "json" || r.URL.Query().Get("format") == "json":
		p.serveJSON(w, r)
	default:
		p.serveHTML(w, r)
	}
}

func securityHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// Nothing to load and nothing to run: inline style only.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	st := p.Snapshot(r.Context())
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		http.Error(w, "statuspage: "+err.Error(), http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(b, '\n'))
	}
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	st := p.Snapshot(r.Context())
	var buf bytes.Buffer
	data := struct {
		Status
		Refresh int
		JSON    string
		Base    string
	}{Status: st, JSON: "?format=json"}
	if p.opts.Refresh > 0 {
		data.Refresh = max(1, int(p.opts.Refresh.Round(time.Second)/time.Second))
	}
	// ?refresh=N reloads every N seconds instead, ?refresh=0 never (to
	// read, select or copy without the page moving).
	if v := r.URL.Query().Get("refresh"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 24*3600 {
			data.Refresh = n
		}
	}
	// Links relative to the page's own directory, whatever the mount point.
	if !strings.HasSuffix(r.URL.Path, "/") {
		data.Base = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:] + "/"
	}
	if err := pageTemplate.Execute(&buf, data); err != nil {
		http.Error(w, "statuspage: "+err.Error(), http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"n":   func(v any) string { return thousands(toInt64(v)) },
	"dur": func(secs float64) string { return shortDuration(secs) },
	"ago": func(now time.Time, t any) string {
		var at time.Time
		switch x := t.(type) {
		case *time.Time:
			if x != nil {
				at = *x
			}
		case time.Time:
			at = x
		}
		if at.IsZero() {
			return "never"
		}
		return shortDuration(now.Sub(at).Seconds()) + " ago"
	},
	"stamp":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	"progress": progressText,
	"pct": func(v *float64) string {
		if v == nil {
			return ""
		}
		return fmt.Sprintf("%.0f%%", *v)
	},
	"state": func(is InformerStatus) string {
		switch {
		case !is.Live && strings.HasPrefix(is.NotLiveReason, "stalled"):
			return "stalled"
		case !is.Live:
			return "failed"
		case is.Synced && is.Progress != nil:
			return "relisting"
		case is.Synced:
			return "synced"
		case is.Progress != nil:
			return "syncing"
		default:
			return "not synced"
		}
	},
	"deref":  func(v *uint64) uint64 { return *v },
	"tderef": func(v *time.Time) time.Time { return *v },
	"fderef": func(v *float64) float64 {
		return *v
	},
}).Parse(pageHTML))

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	case uint64:
		return int64(x)
	case float64:
		return int64(x + 0.5)
	}
	return 0
}

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} informers</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
header{background:#1d2430;color:#fff;padding:12px 20px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}
header h1{font-size:18px;margin:0;font-weight:600}
header a{color:#9cc3ff}
main{padding:16px 20px;max-width:1200px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin:0 0 14px}
h2{font-size:16px;margin:0 0 8px;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
h3{font-size:13px;margin:10px 0 4px;color:#4b5563;text-transform:uppercase;letter-spacing:.04em}
.badge{font-size:12px;font-weight:600;padding:2px 8px;border-radius:10px;background:#e5e7eb;color:#374151}
.synced,.ok{background:#d1fae5;color:#065f46}
.syncing,.relisting{background:#dbeafe;color:#1e40af}
.not-synced,.failed,.stalled,.bad{background:#fee2e2;color:#991b1b}
.kind{background:#f3f4f6;color:#4b5563;font-weight:500}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:3px 10px 3px 0;vertical-align:top;border-bottom:1px solid #f0f1f4}
th{font-weight:500;color:#4b5563;width:210px}
table.list th{width:auto}
.num{font-variant-numeric:tabular-nums}
.err{color:#991b1b}
.warn{color:#92400e}
.muted{color:#6b7280}
progress{width:420px;max-width:100%;height:16px;vertical-align:middle}
.slow td{background:#fff7ed}
.reasons{margin:4px 0 0;padding-left:18px}
</style>
</head>
<body>
<header>
<h1>{{.Title}} — informers</h1>
<span id="ready" class="badge {{if .Ready}}ok{{else}}bad{{end}}">{{if .Ready}}ready{{else}}not ready{{end}}</span>
<span id="live" class="badge {{if .Live}}ok{{else}}bad{{end}}">{{if .Live}}live{{else}}not live{{end}}</span>
<span class="muted">{{stamp .Time}}{{if .Refresh}} · reloads every {{.Refresh}}s{{end}}</span>
<span><a href="{{.Base}}{{.JSON}}">JSON</a> · <a href="{{.Base}}readyz">readyz</a> · <a href="{{.Base}}livez">livez</a></span>
</header>
<main>
{{if not .Ready}}<section id="not-ready"><strong>Not ready:</strong><ul class="reasons">{{range .NotReady}}<li>{{.}}</li>{{end}}</ul></section>{{end}}
{{if not .Live}}<section id="not-live"><strong class="err">Not live:</strong><ul class="reasons">{{range .NotLive}}<li>{{.}}</li>{{end}}</ul></section>{{end}}
{{if not .Informers}}<section><p class="muted">No informers on this page yet: pass the page as InformerOptions.Metrics and Add each informer.</p></section>{{end}}
{{$now := .Time}}
{{range .Informers}}{{$st := state .}}
<section class="informer" data-informer="{{.Name}}">
<h2><span class="name">{{.Name}}</span>{{if .Kind}}<span class="badge kind">{{.Kind}}</span>{{end}}<span class="badge state {{if eq $st "not synced"}}not-synced{{else}}{{$st}}{{end}}" data-state="{{$st}}">{{$st}}</span></h2>
{{if .Progress}}<div class="sync-progress" data-received="{{.Progress.Received}}" data-estimated="{{.Progress.Estimated}}">
{{if .Progress.Estimated}}<progress value="{{.Progress.Received}}" max="{{.Progress.Estimated}}">{{pct .Progress.Percent}}</progress>{{else}}<progress></progress>{{end}}
<span class="progress-text">{{if .Progress.Relist}}relist: {{else}}initial list: {{end}}{{progress .Progress}}</span> <span class="muted">(last report {{ago $now .Progress.LastReportAt}})</span></div>{{end}}
<table>
{{if not .Synced}}<tr><th>Not synced because</th><td class="not-synced-reason err">{{.NotSyncedReason}}</td></tr>{{end}}
{{if not .Live}}<tr><th>Not live because</th><td class="err">{{.NotLiveReason}}</td></tr>{{end}}
{{if .Retrying}}<tr><th>Retrying</th><td class="warn retrying">{{.Retrying}}</td></tr>{{end}}
<tr><th>Applied version</th><td class="num applied">{{.AppliedVersion}}{{if ne .ReceivedVersion .AppliedVersion}} <span class="muted">(received {{.ReceivedVersion}})</span>{{end}}</td></tr>
<tr><th>Source head</th><td class="num head">{{if .HeadVersion}}{{deref .HeadVersion}}{{else if .NoHead}}<span class="muted">unknown (the source cannot tell its head)</span>{{else if not .HeadError}}<span class="muted">not read yet</span>{{end}}{{if .HeadError}} <span class="err">head read failed: {{.HeadError}}</span>{{end}}</td></tr>
<tr><th>Lag</th><td class="num lag">{{if .LagVersions}}<span class="lag-versions">{{n (deref .LagVersions)}}</span> versions{{if .LagSeconds}}, behind for <span class="lag-seconds">{{dur (fderef .LagSeconds)}}</span>{{end}}{{else if .LagUnknownSince}}<span class="warn lag-unknown">unknown since {{stamp (tderef .LagUnknownSince)}} ({{ago $now .LagUnknownSince}}): the head cannot be read</span>{{else}}<span class="muted">unknown</span>{{end}}</td></tr>
<tr><th>Lists</th><td class="num lists">{{.Lists.Lists}} list{{if ne .Lists.Lists 1}}s{{end}} ({{.Lists.ListErrors}} failed), {{.Lists.Relists}} relist{{if ne .Lists.Relists 1}}s{{end}} ({{.Lists.RelistErrors}} failed); last {{ago $now .Lists.LastAt}}{{if .Lists.LastAt}}, {{n .Lists.ListedObjects}} objects{{end}}</td></tr>
{{if .Lists.LastError}}<tr><th>Last list error</th><td class="err last-list-error">{{.Lists.LastError}} <span class="muted">({{ago $now .Lists.LastErrorAt}})</span></td></tr>{{end}}
<tr><th>Watch restarts</th><td class="num restarts">{{.WatchRestarts.Total}} ({{.WatchRestarts.Timeout}} planned, {{.WatchRestarts.Expired}} expired → relist, {{.WatchRestarts.Error}} errors){{if .WatchRestarts.LastAt}}; last {{ago $now .WatchRestarts.LastAt}}: <span class="restart-reason">{{.WatchRestarts.LastReason}}</span>{{end}}</td></tr>
<tr><th>Decode errors</th><td class="num decode">{{.DecodeErrors.Count}}{{if .DecodeErrors.LastAt}}; last {{ago $now .DecodeErrors.LastAt}}{{if .DecodeErrors.Last}}: <span class="err">{{.DecodeErrors.Last}}</span>{{end}}{{end}}</td></tr>
<tr><th>Checkpoints</th><td class="checkpoint">{{.Checkpoints}}</td></tr>
{{with .SchemaChanges}}<tr><th>Schema changes</th><td class="schema"><span class="{{if eq .Action "fail"}}err{{else}}warn{{end}}">{{.Count}}</span>, the last {{ago $now .At}}: {{.Last}}</td></tr>{{end}}
<tr><th>Audit</th><td class="audit">{{if .Audit}}<span class="audit-outcome {{if eq .Audit.Outcome "equal"}}ok{{else if eq .Audit.Outcome "divergent"}}err{{else}}warn{{end}}">{{.Audit.Outcome}}</span> {{ago $now .Audit.At}}: {{.Audit.Summary}}{{if .Audit.Runs}} <span class="muted">({{.Audit.Runs}} runs, {{.Audit.Divergent}} divergent, {{.Audit.Failed}} failed)</span>{{end}}{{else}}<span class="muted">none run (InformerOptions.Audit is not set, or its first period has not passed)</span>{{end}}</td></tr>
{{if not .Metrics}}<tr><th>Metrics</th><td class="warn">not connected: set InformerOptions.Metrics to the page (or core.MultiMetrics of it and another provider) for lists, restarts, progress and handlers</td></tr>{{end}}
</table>
<h3>Handlers</h3>
{{if .Handlers}}<table class="list handlers"><tr><th>handler</th><th>pending notifications</th><th>peak</th><th>panics</th></tr>
{{$slow := .SlowestHandler}}{{range .Handlers}}<tr class="handler{{if eq .Name $slow}} slow{{end}}" data-handler="{{.Name}}"><td>{{.Name}}{{if eq .Name $slow}} <span class="badge bad slowest">slowest</span>{{end}}</td><td class="num pending">{{n .Pending}}</td><td class="num">{{n .PeakPending}}</td><td class="num">{{.Panics}}</td></tr>
{{end}}</table>
{{if .SlowestHandler}}<p>Slowest handler: <strong class="slowest-handler">{{.SlowestHandler}}</strong></p>{{else}}<p class="muted">No notifications waiting.</p>{{end}}
{{else}}<p class="muted">No handler has reported yet.</p>{{end}}
</section>
{{end}}
{{if .Queues}}<section id="queues"><h2>Work queues</h2>
<table class="list queues"><tr><th>queue</th><th>depth</th><th>adds</th><th>retries</th><th>processed</th><th>wait avg / max</th><th>work avg / max</th><th>longest running</th><th>unfinished work</th></tr>
{{range .Queues}}<tr class="queue" data-queue="{{.Name}}"><td>{{.Name}}</td><td class="num depth">{{n .Depth}}</td><td class="num">{{n .Adds}}</td><td class="num">{{n .Retries}}</td><td class="num">{{n .Processed}}</td><td class="num">{{dur .AvgWaitSeconds}} / {{dur .MaxWaitSeconds}}</td><td class="num">{{dur .AvgWorkSeconds}} / {{dur .MaxWorkSeconds}}</td><td class="num longest">{{dur .LongestRunningSeconds}}</td><td class="num">{{dur .UnfinishedWorkSeconds}}</td></tr>
{{end}}</table></section>{{end}}
{{if .Relays}}<section id="relays"><h2>Relays</h2>
<table class="list"><tr><th>Relay</th><th>Role</th><th>Term</th><th>Stream</th><th>Stored</th><th>Source head</th><th>Lag</th><th>Published</th><th>Relists</th><th>Repairs</th><th>Term restarts</th></tr>
{{range .Relays}}<tr class="relay" data-relay="{{.Name}}"><td>{{.Name}}</td><td><span class="badge role {{if .Leading}}ok{{end}}" data-role="{{.Role}}">{{.Role}}</span>{{if .Leading}} <span class="muted">since {{ago $now .LeadingSince}}</span>{{end}}</td><td class="num epoch">{{if .Epoch}}{{.Epoch}}{{if .Identity}} <span class="muted">({{.Identity}})</span>{{end}}{{else}}<span class="muted">never led</span>{{end}}</td><td class="num stream">{{if .StreamError}}<span class="err">{{.StreamError}}</span>{{else}}version {{.StreamVersion}}, sequence {{.StreamSequence}}, term {{.StreamEpoch}}{{end}}</td><td class="num stored">{{.Stored}}</td><td class="num head">{{if .HasHead}}{{.Head}}{{else if .HeadError}}<span class="err">{{.HeadError}}</span>{{else}}<span class="muted">unknown</span>{{end}}</td><td class="num lag">{{if .LagVersions}}{{n (deref .LagVersions)}}{{else}}<span class="muted">unknown</span>{{end}}</td><td class="num published">{{n .Published}}</td><td class="num relists">{{.Relists}}</td><td class="num repairs">{{.Repairs}}</td><td class="num restarts">{{.TermRestarts}}{{if .LastError}} <span class="err last-error">{{.LastError}}</span> <span class="muted">({{ago $now .LastErrorAt}})</span>{{end}}</td></tr>
{{end}}</table></section>{{end}}
</main>
</body>
</html>
`
