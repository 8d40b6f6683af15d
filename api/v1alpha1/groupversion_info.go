// Package v1alpha1 holds the farm.clawfarm.dev/v1alpha1 API: AgentRun (one task on one
// phone rig) and DeviceRig (one phone rig).
// +kubebuilder:object:generate=true
// +groupName=farm.clawfarm.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "farm.clawfarm.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
