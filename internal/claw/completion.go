package claw

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Shell completion of names: cobra's __complete asks the ValidArgsFunction
// of a command, or a flag's completion function, for the words that fit;
// they list the AgentRuns or DeviceRigs of the namespace (-n, else the
// kubeconfig's) as kubectl's own completion lists objects. kubectl 1.26
// and later completes a plugin's arguments through kubectl_complete-claw
// (cmd/kubectl-claw), which hands the request to kubectl-claw __complete.

// completeTimeout bounds the API call: a shell waits for the answer.
const completeTimeout = 5 * time.Second

// completeRuns offers the names of the namespace's AgentRuns for a
// command's one RUN argument.
func (o *Options) completeRuns(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return o.completeNames(cmd.Context(), &farmv1.AgentRunList{}, toComplete)
}

// completeRigs offers the names of the namespace's DeviceRigs for --rig.
func (o *Options) completeRigs(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return o.completeNames(cmd.Context(), &farmv1.DeviceRigList{}, toComplete)
}

func (o *Options) completeNames(ctx context.Context, list client.ObjectList, prefix string) ([]string, cobra.ShellCompDirective) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	c, err := o.Client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ns, _, err := o.Namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if n := o.(client.Object).GetName(); strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
		return nil
	})
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}
