package claw

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func (o *Options) newRigsCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "rigs",
		Short: "List the DeviceRigs with their phase, current run and queue",
		Long: `rigs lists the DeviceRigs with their phase, the run holding each (with its
turn), and the runs waiting: QUEUE counts the runs that name the rig
(spec.rigRef), SELECTOR the waiting selector runs the rig could serve (a
selector run that matches several rigs counts at each). A run waits while it
is Pending or Queued, not cancelled and not being deleted — the operator's
own rule (AgentRun.WaitsForRig in api/v1alpha1).`,
		Example: `  kubectl claw rigs
  kubectl claw rigs -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.rigs(cmd.Context(), all)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the rigs of every namespace")
	return cmd
}

// RigRow is one line of `kubectl claw rigs`.
type RigRow struct {
	Namespace, Name, Node string
	Phase                 farmv1.RigPhase
	Run                   string
	Turn, MaxTurns        int32
	// Queue counts the waiting runs that name the rig; Selector the waiting
	// selector runs it could serve.
	Queue, Selector int
	Age             time.Duration
}

// RigRows reads the rigs and runs of a namespace ("" for all) into rows,
// sorted by namespace and name.
func RigRows(ctx context.Context, c client.Client, ns string, now time.Time) ([]RigRow, error) {
	var rigs farmv1.DeviceRigList
	if err := c.List(ctx, &rigs, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list devicerigs: %w", err)
	}
	var runs farmv1.AgentRunList
	if err := c.List(ctx, &runs, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list agentruns: %w", err)
	}
	byName := map[string]*farmv1.AgentRun{}
	for i := range runs.Items {
		r := &runs.Items[i]
		byName[r.Namespace+"/"+r.Name] = r
	}
	rows := make([]RigRow, 0, len(rigs.Items))
	for i := range rigs.Items {
		rig := &rigs.Items[i]
		row := RigRow{Namespace: rig.Namespace, Name: rig.Name, Node: rig.Spec.NodeName, Phase: rig.Status.Phase,
			Run: rig.Status.CurrentRun, Age: now.Sub(rig.CreationTimestamp.Time)}
		if cur := byName[rig.Namespace+"/"+row.Run]; cur != nil {
			row.MaxTurns = cur.Spec.Limits.MaxTurns
			if pr := cur.Status.Progress; pr != nil {
				row.Turn = pr.Turn
			}
		}
		for j := range runs.Items {
			run := &runs.Items[j]
			if run.Namespace != rig.Namespace || run.Name == row.Run || !run.WaitsForRig() {
				continue
			}
			switch {
			case run.Spec.RigRef != nil:
				if run.Spec.RigRef.Name == rig.Name {
					row.Queue++
				}
			case run.Spec.RigSelector != nil:
				if labels.SelectorFromSet(run.Spec.RigSelector.MatchLabels).Matches(labels.Set(rig.Labels)) {
					row.Selector++
				}
			}
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows, nil
}

func (o *Options) rigs(ctx context.Context, all bool) error {
	c, err := o.Client()
	if err != nil {
		return err
	}
	ns := ""
	if !all {
		if ns, _, err = o.Namespace(); err != nil {
			return err
		}
	}
	rows, err := RigRows(ctx, c, ns, time.Now())
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		where := "in namespace " + ns
		if all {
			where = "in any namespace"
		}
		fmt.Fprintf(o.Streams.ErrOut, "No DeviceRigs %s.\n", where)
		return nil
	}
	tw := tabwriter.NewWriter(o.Streams.Out, 0, 4, 3, ' ', 0)
	if all {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tNODE\tPHASE\tRUN\tTURN\tQUEUE\tSELECTOR\tAGE")
	for _, r := range rows {
		if all {
			fmt.Fprint(tw, r.Namespace+"\t")
		}
		run, turn := dash(r.Run), "-"
		if r.Run != "" && r.MaxTurns > 0 {
			turn = fmt.Sprintf("%d/%d", r.Turn, r.MaxTurns)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Name, dash(r.Node), dash(string(r.Phase)), run, turn,
			r.Queue, r.Selector, duration.HumanDuration(r.Age))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
