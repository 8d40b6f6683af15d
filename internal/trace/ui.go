package trace

import (
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

//go:embed ui
var uiFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"pct": func(f float64) string { return strconv.FormatFloat(f*100, 'f', 2, 64) + "%" },
	"age": func(t time.Time) string { return age(time.Since(t)) },
	"q":   url.PathEscape,
	"centre": func(b *[4]float64) [2]float64 {
		return [2]float64{(b[0] + b[2]) / 2, (b[1] + b[3]) / 2}
	},
	"arrow": arrow,
	"sub":   func(a, b float64) float64 { return a - b },
	"css":   func() template.CSS { return template.CSS(mustRead("ui/app.css")) },
	"lower": strings.ToLower,
	"lines": func(s string) int { return strings.Count(strings.TrimRight(s, "\n"), "\n") + 1 },
	"firstLine": func(s string) string {
		first, _, _ := strings.Cut(s, "\n")
		return first
	},
}).ParseFS(uiFiles, "ui/*.html"))

func mustRead(name string) string {
	b, err := fs.ReadFile(uiFiles, name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// arrow is a swipe's stylus motion, from the bbox's centre, in screen fractions.
func arrow(b *[4]float64, direction string) [4]float64 {
	cx, cy := (b[0]+b[2])/2, (b[1]+b[3])/2
	const d = 0.18
	x2, y2 := cx, cy
	switch direction {
	case "up":
		y2 -= d
	case "down":
		y2 += d
	case "left":
		x2 -= d
	case "right":
		x2 += d
	}
	return [4]float64{cx, cy, clamp01(x2), clamp01(y2)}
}

func clamp01(f float64) float64 { return min(1, max(0, f)) }

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func (s *Server) uiRoutes(m *http.ServeMux) {
	static, _ := fs.Sub(uiFiles, "ui")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", s.reader(s.listPage))
	m.HandleFunc("GET /runs/{ns}/{name}", s.reader(s.runPage))
	m.HandleFunc("GET /runs/{ns}/{name}/attempts/{n}", s.reader(s.attemptFragment))
	m.HandleFunc("GET /runs/{ns}/{name}/export", s.reader(s.exportPage))
}

type listView struct {
	Filter RunFilter
	Runs   []RunSummary
	Phases []string
}

func (s *Server) listPage(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	f := filterOf(r)
	runs, err := s.runs(r.Context(), rc, f)
	if err != nil {
		s.reply(w, err)
		return
	}
	s.render(w, "list.html", listView{Filter: f, Runs: runs, Phases: []string{"Pending", "Queued", "Running", "Retrying", "Waiting", "Succeeded", "Failed", "Cancelled"}})
}

// runView is a run page: the run and each attempt turn by turn.
type runView struct {
	Run      RunSummary
	Records  []farmv1.AttemptRecord
	Attempts []attemptView
	Live     bool
	// Export inlines the screens and leaves the scripts out.
	Export bool
}

type attemptView struct {
	Run    RunSummary
	Trace  *AttemptTrace
	Stored bool
	Live   bool
	Export bool
	// Screens maps a screen file to its URL (or data: URI in an export).
	Screens map[string]template.URL
	Record  *farmv1.AttemptRecord
}

func (s *Server) runView(ctx context.Context, rc readerCtx, ns, name string, export bool) (*runView, error) {
	run, err := s.run(ctx, rc, ns, name)
	if err != nil {
		return nil, err
	}
	nums, _, err := s.attempts(ctx, run)
	if err != nil {
		return nil, err
	}
	v := &runView{Run: summarize(run), Records: run.Status.Attempts, Export: export,
		Live: !export && liveRun(run)}
	for _, n := range nums {
		av, err := s.attemptView(ctx, run, n, export)
		if err != nil {
			return nil, err
		}
		av.Live = v.Live && n == int(run.Status.Attempt)
		v.Attempts = append(v.Attempts, *av)
	}
	return v, nil
}

func (s *Server) attemptView(ctx context.Context, run *farmv1.AgentRun, n int, export bool) (*attemptView, error) {
	prefix := attemptPrefix(run.Namespace, run.Name, run.UID, n)
	av := &attemptView{Run: summarize(run), Export: export, Screens: map[string]template.URL{}}
	for i := range run.Status.Attempts {
		if int(run.Status.Attempts[i].Attempt) == n {
			av.Record = &run.Status.Attempts[i] // the last retry of the attempt
		}
	}
	t, stored, err := s.readAttempt(ctx, prefix, n)
	if err != nil {
		return nil, err
	}
	av.Trace, av.Stored = t, stored
	for _, sc := range t.Screens {
		if export {
			uri, err := s.dataURI(ctx, prefix+"screens/"+sc.File)
			if err != nil {
				return nil, err
			}
			av.Screens[sc.File] = uri
			continue
		}
		av.Screens[sc.File] = template.URL(fmt.Sprintf("/api/v1/runs/%s/%s/attempts/%d/screens/%s",
			url.PathEscape(run.Namespace), url.PathEscape(run.Name), n, url.PathEscape(sc.File)))
	}
	return av, nil
}

func (s *Server) dataURI(ctx context.Context, key string) (template.URL, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return "", err
	}
	return template.URL("data:" + http.DetectContentType(b) + ";base64," + base64.StdEncoding.EncodeToString(b)), nil
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	v, err := s.runView(r.Context(), rc, r.PathValue("ns"), r.PathValue("name"), false)
	if err != nil {
		s.reply(w, err)
		return
	}
	s.render(w, "run.html", v)
}

func (s *Server) attemptFragment(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	run, n, _, err := s.attemptOf(r, rc)
	if err != nil {
		s.reply(w, err)
		return
	}
	av, err := s.attemptView(r.Context(), run, n, false)
	if err != nil {
		s.reply(w, err)
		return
	}
	av.Live = liveRun(run) && n == int(run.Status.Attempt)
	s.render(w, "attempt", av)
}

// exportPage is one self-contained HTML file: styles and screens inlined,
// no script, to attach to a bug report.
func (s *Server) exportPage(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	v, err := s.runView(r.Context(), rc, r.PathValue("ns"), r.PathValue("name"), true)
	if err != nil {
		s.reply(w, err)
		return
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+v.Run.Name+`.html"`)
	s.render(w, "run.html", v)
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.reply(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// liveRun is a run whose current attempt may still gain turns.
func liveRun(run *farmv1.AgentRun) bool {
	switch run.Status.Phase {
	case farmv1.RunPending, farmv1.RunQueued, farmv1.RunRunning, farmv1.RunRetrying:
		return true
	}
	return false
}
