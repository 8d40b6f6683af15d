// Package v1alpha1 holds the farm.clawfarm.dev/v1alpha1 API: AgentRun (one task on one
// phone rig) and DeviceRig (one phone rig).
// +kubebuilder:object:generate=true
// +groupName=farm.clawfarm.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "farm.clawfarm.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers every kind of this API and the list and option
// types a client needs beside them.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&AgentRun{}, &AgentRunList{},
		&DeviceRig{}, &DeviceRigList{},
		&ToolPolicy{}, &ToolPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
