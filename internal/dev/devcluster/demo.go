package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// AnnotationRigFaults on a demo run holds rigsim faults (JSON) the demo injects
// into the run's rig before the run starts.
const AnnotationRigFaults = "demo.clawfarm.dev/rig-faults"

// LabelDemo marks the demo's runs.
const LabelDemo = "demo.clawfarm.dev/sample"

// Provider is where demo runs get their model: modelsim unless a real
// provider is configured through MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME.
type Provider struct {
	Kind, BaseURL, Model string
	Real                 bool
}

// ProviderFromEnv reads MODEL_BASE_URL, MODEL_NAME (and MODEL_PROVIDER,
// default openai-compatible); the key itself goes only into the Secret.
func ProviderFromEnv() (Provider, error) {
	base, name := os.Getenv("MODEL_BASE_URL"), os.Getenv("MODEL_NAME")
	if base == "" && name == "" {
		return Provider{}, nil
	}
	if base == "" || name == "" || os.Getenv("MODEL_API_KEY") == "" {
		return Provider{}, fmt.Errorf("a real provider needs MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME all set (got base URL %q, model %q, key set: %t)",
			base, name, os.Getenv("MODEL_API_KEY") != "")
	}
	kind := os.Getenv("MODEL_PROVIDER")
	if kind == "" {
		kind = "openai-compatible"
	}
	return Provider{Kind: kind, BaseURL: base, Model: name, Real: true}, nil
}

// LoadRuns reads AgentRuns from a multi-document YAML file.
func LoadRuns(path string) ([]*farmv1.AgentRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var runs []*farmv1.AgentRun
	for i, doc := range splitYAML(string(b)) {
		var run farmv1.AgentRun
		if err := yaml.UnmarshalStrict([]byte(doc), &run); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", path, i+1, err)
		}
		if run.Kind != "AgentRun" {
			return nil, fmt.Errorf("%s document %d: kind %q, want AgentRun", path, i+1, run.Kind)
		}
		runs = append(runs, &run)
	}
	return runs, nil
}

// Demo applies the sample runs of config/demo/runs.yaml, shows them
// progressing until each has reached its sentinel (and a follow-up due within
// a few minutes has run too), and says where to look next.
func (c *Cluster) Demo(ctx context.Context, out io.Writer, p Provider, timeout time.Duration) error {
	runs, err := LoadRuns(filepath.Join(c.Root, "config", "demo", "runs.yaml"))
	if err != nil {
		return err
	}
	for _, run := range runs {
		run.Namespace = c.Namespace
		if run.Labels == nil {
			run.Labels = map[string]string{}
		}
		run.Labels[LabelDemo] = "true"
		if p.Real {
			run.Spec.Model.Provider, run.Spec.Model.BaseURL, run.Spec.Model.Name = farmv1.ModelProvider(p.Kind), p.BaseURL, p.Model
		} else {
			run.Spec.Model.BaseURL = c.ModelBaseURL()
		}
		if f := run.Annotations[AnnotationRigFaults]; f != "" && run.Spec.RigRef != nil {
			if err := c.SetRigFaults(ctx, run.Spec.RigRef.Name, f); err != nil {
				return fmt.Errorf("run %s: %w", run.Name, err)
			}
		}
		if err := c.Client.Create(ctx, run); err != nil {
			return fmt.Errorf("create AgentRun %s: %w", run.Name, err)
		}
	}
	model := "modelsim (" + c.ModelBaseURL() + ")"
	if p.Real {
		model = p.Model + " at " + p.BaseURL
	}
	fmt.Fprintf(out, "Applied %d AgentRuns (config/demo/runs.yaml), model: %s\n\n", len(runs), model)
	err = c.watchRuns(ctx, out, timeout)
	if perr := c.printPlaces(ctx, out); perr != nil && err == nil {
		err = perr
	}
	c.printNext(out)
	return err
}

// printPlaces prints where the operator's pods ran (PlaceTable).
func (c *Cluster) printPlaces(ctx context.Context, out io.Writer) error {
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods); err != nil {
		return err
	}
	runtimes, err := c.NodeRuntimes(ctx)
	if err != nil {
		return err
	}
	fmt.Fprint(out, "\nWhere the operator's pods ran (kubectl get pods -A -o wide; kubectl get nodes -o wide):\n"+PlaceTable(pods.Items, runtimes))
	return nil
}

// NodeRuntimes maps each node of the cluster to the container runtime it
// reports (containerd://2.4.2 on a kubelet node, rignode's on the others).
func (c *Cluster) NodeRuntimes(ctx context.Context) (map[string]string, error) {
	var nodes corev1.NodeList
	if err := c.Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(nodes.Items))
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.ContainerRuntimeVersion
	}
	return out, nil
}

// PlaceTable renders where each of the operator's pods runs or ran — the
// manager, the trace server, loop pods and follow-up Jobs' pods — with its
// node and that node's container runtime (runtime, from NodeRuntimes).
func PlaceTable(pods []corev1.Pod, runtime map[string]string) string {
	var rows []string
	for _, p := range pods {
		ours := p.Namespace == OperatorNamespace || p.Labels[farmv1.LabelRun] != "" || p.Labels["batch.kubernetes.io/job-name"] != ""
		if !ours {
			continue
		}
		rows = append(rows, fmt.Sprintf("%s/%s\t%s\t%s", p.Namespace, p.Name, dash(p.Spec.NodeName), dash(runtime[p.Spec.NodeName])))
	}
	sort.Strings(rows)
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tRUNTIME")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
	return b.String()
}

// SetRigFaults merges rigsim faults (a JSON object) into a rig's.
func (c *Cluster) SetRigFaults(ctx context.Context, rig, faults string) error {
	return c.rigsim(ctx, http.MethodPost, rig, "/api/sim/faults", faults)
}

// ClearRigFaults clears every fault of a rig.
func (c *Cluster) ClearRigFaults(ctx context.Context, rig string) error {
	return c.rigsim(ctx, http.MethodDelete, rig, "/api/sim/faults", "")
}

func (c *Cluster) rigsim(ctx context.Context, method, rig, path, body string) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/rigs/%s%s", c.Ports().Rigsim, rig, path)
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("rigsim %s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("rigsim %s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// followUpSoon is how far ahead a follow-up may be due for the demo to wait for it.
const followUpSoon = 4 * time.Minute

// watchRuns redraws the table of runs every two seconds until every run has
// finished, or waits for a follow-up that is further away than followUpSoon.
func (c *Cluster) watchRuns(ctx context.Context, out io.Writer, timeout time.Duration) error {
	tty, width := false, 0
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = true
		if w, _, err := term.GetSize(int(f.Fd())); err == nil {
			width = w
		}
	}
	deadline := time.Now().Add(timeout)
	var last string
	lines := 0
	for {
		var list farmv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
			return err
		}
		table, done, note := RunTable(list.Items, time.Now())
		if tty && width > 0 { // a wrapped line would throw the redraw off
			table = clipLines(table, width-1)
		}
		if table != last {
			if tty && lines > 0 {
				fmt.Fprintf(out, "\033[%dA\033[J", lines)
			}
			fmt.Fprint(out, table)
			lines, last = strings.Count(table, "\n"), table
		}
		if done {
			if note != "" {
				fmt.Fprintln(out, "\n"+note)
			}
			fmt.Fprintln(out, "\nEvery sample run has reached its sentinel.")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every run reached its sentinel within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// RunTable renders runs as the demo's table, and reports whether every run
// has reached its sentinel: finished, or Waiting for a follow-up that is more
// than followUpSoon away (note says when it fires).
func RunTable(runs []farmv1.AgentRun, now time.Time) (table string, done bool, note string) {
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].CreationTimestamp.Equal(&runs[j].CreationTimestamp) {
			return runs[i].CreationTimestamp.Before(&runs[j].CreationTimestamp)
		}
		return runs[i].Name < runs[j].Name
	})
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tRIG\tPHASE\tSENTINEL\tATTEMPT\tTURN\tNOTE")
	done = len(runs) > 0
	for _, r := range runs {
		st := r.Status
		turn, last := "", ""
		if st.Progress != nil && !st.Phase.Finished() {
			turn, last = fmt.Sprint(st.Progress.Turn), st.Progress.LastNote
		}
		if st.Phase.Finished() {
			last = st.Recap
		}
		if st.Phase == farmv1.RunWaiting && st.FollowUp != nil && st.FollowUp.FireTime != nil {
			left := st.FollowUp.FireTime.Sub(now).Round(time.Second)
			last = fmt.Sprintf("follow-up %s fires in %s (CronJob %s)", st.FollowUp.Run, max(left, 0), st.FollowUp.CronJob)
			if left > followUpSoon {
				note = fmt.Sprintf("%s is Waiting: its follow-up %s fires at %s (kubectl get cronjob %s).",
					r.Name, st.FollowUp.Run, st.FollowUp.FireTime.Local().Format("15:04"), st.FollowUp.CronJob)
			} else {
				done = false
			}
		} else if !st.Phase.Finished() {
			done = false
		}
		if len(last) > 60 {
			last = last[:57] + "..."
		}
		rig := st.Rig
		if rig == "" && r.Spec.RigRef != nil {
			rig = r.Spec.RigRef.Name
		}
		phase := string(st.Phase)
		if phase == "" {
			phase = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Name, rig, phase, dash(st.Sentinel), st.Attempt, dash(turn), last)
	}
	w.Flush()
	return b.String(), done, note
}

// clipLines cuts every line of s to at most width runes.
func clipLines(s string, width int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if r := []rune(l); len(r) > width {
			lines[i] = string(r[:width])
		}
	}
	return strings.Join(lines, "\n")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *Cluster) printNext(out io.Writer) {
	fmt.Fprintf(out, `
Where to look next (kubectl is the one built for the cluster, kubectl claw the project's plugin):
  export KUBECONFIG=%s PATH=%s:%s:$PATH
  kubectl claw ui                                    # the trace viewer: every turn's screen, note and tap, live
  kubectl claw trace order-coffee                    # the same, as lines in the terminal
  kubectl get ar -w                                  # runs, live
  kubectl describe ar order-coffee                   # conditions, attempts (STUCK then DONE), events
  kubectl logs order-coffee-a2                       # the loop's event stream (JSON lines)
  kubectl get cronjob,job -l farm.clawfarm.dev/kind=followup   # WAIT follow-ups
  kubectl get ar ask-ana-f1                          # the follow-up run the CronJob created
  kubectl get rig                                    # the simulated rigs
  curl -s %s/api/sim/state                # rig-0's ground truth (the timer runs)
Logs of every component: %s/logs/
Stop the cluster: make dev-down
`, c.Kubeconfig, c.k8s, filepath.Join(c.Root, "bin"), c.RigURL(0), c.Dir)
}
