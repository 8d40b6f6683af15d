package claw

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/version"
)

// versionInfo is what `kubectl claw version` reports, as kubectl version
// does: this binary's build, the API server's version and, for each
// operator installed by the chart, its manager Deployments.
type versionInfo struct {
	Client    buildVersion      `json:"clientVersion"`
	Server    string            `json:"serverVersion,omitempty"`
	Operators []operatorVersion `json:"operators,omitempty"`
}

type buildVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
}

// operatorVersion is one manager Deployment of the chart (one per shard).
type operatorVersion struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Version is the chart's app version (the app.kubernetes.io/version label).
	Version  string `json:"version"`
	Image    string `json:"image"`
	Ready    int32  `json:"readyReplicas"`
	Replicas int32  `json:"replicas"`
}

// The labels the chart gives the manager's Deployments.
const (
	labelAppName      = "app.kubernetes.io/name"
	labelAppComponent = "app.kubernetes.io/component"
	labelAppVersion   = "app.kubernetes.io/version"
)

func (o *Options) newVersionCommand() *cobra.Command {
	var clientOnly bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of kubectl claw, the API server and the operator",
		Long: `version prints this kubectl claw's version, revision and Go version; then,
unless --client, the API server's version and every clawfarm manager the
chart installed (its Deployments labelled app.kubernetes.io/name=clawfarm,
app.kubernetes.io/component=manager, in any namespace you may list): its
version, image and ready replicas. A cluster it cannot ask is reported on
stderr and the client's version still printed.`,
		Example: `  kubectl claw version
  kubectl claw version --client -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return &exitError{code: ExitError, msg: fmt.Sprintf("--output %q: want json or yaml", output)}
			}
			info := versionInfo{Client: buildVersion{Version: version.Version, Revision: version.ShortRevision(), GoVersion: runtime.Version()}}
			if !clientOnly {
				o.serverVersions(cmd.Context(), &info)
			}
			return o.printVersion(info, output)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only, without asking the cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml; empty: lines for people")
	return cmd
}

// serverVersions fills in what the cluster says; what it cannot learn it
// says on stderr.
func (o *Options) serverVersions(ctx context.Context, info *versionInfo) {
	dc, err := o.Config.ToDiscoveryClient()
	if err == nil {
		sv, verr := dc.ServerVersion()
		if err = verr; err == nil {
			info.Server = sv.GitVersion
		}
	}
	if err != nil {
		fmt.Fprintf(o.Streams.ErrOut, "warning: the API server's version: %v\n", err)
		return
	}
	c, err := o.Client()
	if err != nil {
		fmt.Fprintf(o.Streams.ErrOut, "warning: the operator's version: %v\n", err)
		return
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.MatchingLabels{labelAppName: "clawfarm", labelAppComponent: "manager"}); err != nil {
		fmt.Fprintf(o.Streams.ErrOut, "warning: the operator's version: list its Deployments: %v\n", err)
		return
	}
	for _, d := range deps.Items {
		ov := operatorVersion{Namespace: d.Namespace, Name: d.Name, Version: d.Labels[labelAppVersion], Ready: d.Status.ReadyReplicas}
		if d.Spec.Replicas != nil {
			ov.Replicas = *d.Spec.Replicas
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if ctr.Name == "manager" || ov.Image == "" {
				ov.Image = ctr.Image
			}
		}
		info.Operators = append(info.Operators, ov)
	}
	sort.Slice(info.Operators, func(i, j int) bool {
		a, b := info.Operators[i], info.Operators[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
}

func (o *Options) printVersion(info versionInfo, output string) error {
	out := o.Streams.Out
	switch output {
	case "json":
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(info)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	client := info.Client.Version
	if info.Client.Revision != "" {
		client += " (" + info.Client.Revision + ")"
	}
	fmt.Fprintf(out, "Client Version: %s, %s\n", client, info.Client.GoVersion)
	if info.Server != "" {
		fmt.Fprintf(out, "Server Version: %s\n", info.Server)
	}
	for _, op := range info.Operators {
		fmt.Fprintf(out, "Operator: %s/%s %s, %d/%d ready, image %s\n", op.Namespace, op.Name, op.Version, op.Ready, op.Replicas, op.Image)
	}
	if info.Server != "" && len(info.Operators) == 0 {
		fmt.Fprintf(out, "Operator: none found (no Deployment labelled %s=clawfarm,%s=manager that you may list)\n", labelAppName, labelAppComponent)
	}
	return nil
}
