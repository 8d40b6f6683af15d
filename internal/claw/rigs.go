package claw

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

func (o *Options) newRigsCommand() *cobra.Command {
	var all bool
	out := newOutputFlags(true)
	cmd := &cobra.Command{
		Use:   "rigs",
		Short: "List the DeviceRigs with their phase, current run and queue",
		Long: `rigs lists the DeviceRigs with their phase, the run holding each (with its
turn), and the runs waiting: QUEUE counts the runs that name the rig
(spec.rigRef), SELECTOR the waiting selector runs the rig could serve (a
selector run that matches several rigs counts at each). A run waits while it
is Pending or Queued, not cancelled and not being deleted — the operator's
own rule (AgentRun.WaitsForRig in api/v1alpha1). RUN is the run whose
RigLeased condition names the rig: the one its Lease names.

-o wide adds the platform, the phone model and the MCP endpoint; -o json,
yaml, name, jsonpath=… and go-template=… print the DeviceRigs themselves,
as kubectl get does.`,
		Example: `  kubectl claw rigs
  kubectl claw rigs -A -o wide
  kubectl claw rigs -o jsonpath='{.items[*].metadata.name}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			return o.rigs(cmd.Context(), all, out)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the rigs of every namespace")
	out.addFlags(cmd)
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

	// Rig is the DeviceRig the row is made from.
	Rig *farmv1.DeviceRig
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
	holder := map[string]string{} // namespace/rig → the run whose RigLeased is True on it
	for i := range runs.Items {
		r := &runs.Items[i]
		byName[r.Namespace+"/"+r.Name] = r
		if r.Status.Rig != "" && !r.Status.Phase.Finished() && conditions.IsTrue(r.Status.Conditions, farmv1.ConditionRigLeased) {
			holder[r.Namespace+"/"+r.Status.Rig] = r.Name
		}
	}
	rows := make([]RigRow, 0, len(rigs.Items))
	for i := range rigs.Items {
		rig := &rigs.Items[i]
		row := RigRow{Namespace: rig.Namespace, Name: rig.Name, Node: rig.Spec.NodeName, Phase: rig.Status.Phase,
			Run: holder[rig.Namespace+"/"+rig.Name], Age: now.Sub(rig.CreationTimestamp.Time), Rig: rig}
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

func (o *Options) rigs(ctx context.Context, all bool, out *outputFlags) error {
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
	if !out.human() {
		objs := make([]runtime.Object, len(rows))
		for i := range rows {
			objs[i] = rows[i].Rig
		}
		return out.printList(o.Streams.Out, objs)
	}
	if len(rows) == 0 {
		where := "in namespace " + ns
		if all {
			where = "in any namespace"
		}
		fmt.Fprintf(o.Streams.ErrOut, "No DeviceRigs %s.\n", where)
		return nil
	}
	return out.printTable(o.Streams.Out, rigTable(rows), all)
}

// rigTable is the rows as a Table; the wide columns are those the
// DeviceRig CRD prints with -o wide.
func rigTable(rows []RigRow) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"}, {Name: "Node", Type: "string"}, {Name: "Phase", Type: "string"},
		{Name: "Run", Type: "string"}, {Name: "Turn", Type: "string"}, {Name: "Queue", Type: "integer"},
		{Name: "Selector", Type: "integer"}, {Name: "Age", Type: "string"},
		{Name: "Platform", Type: "string", Priority: 1}, {Name: "Model", Type: "string", Priority: 1},
		{Name: "Endpoint", Type: "string", Priority: 1},
	}}
	for _, r := range rows {
		turn := "-"
		if r.Run != "" && r.MaxTurns > 0 {
			turn = fmt.Sprintf("%d/%d", r.Turn, r.MaxTurns)
		}
		phone := r.Rig.Spec.Phone
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{r.Name, dash(r.Node), dash(string(r.Phase)), dash(r.Run), turn, r.Queue, r.Selector,
				duration.HumanDuration(r.Age), dash(phone.Platform), dash(phone.Model), dash(r.Rig.Spec.Endpoint.URL)},
			Object: runtime.RawExtension{Object: r.Rig},
		})
	}
	return t
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
