package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RigEndpoint is where the rig's MCP server and health route answer. The
// manager fetches the health route from its own network position, so both
// URLs name the rig's host and nothing that answers for the cloud
// (docs/security.md, control 8).
// +kubebuilder:validation:XValidation:rule="!has(self.healthURL) || self.healthURL.lowerAscii().find('//(\\\\[[^\\\\]]*\\\\]|[^/:?#]+)') == self.url.lowerAscii().find('//(\\\\[[^\\\\]]*\\\\]|[^/:?#]+)')",message="endpoint.healthURL must be on the endpoint URL's host: the manager fetches it, so it may not point anywhere else"
// +kubebuilder:validation:XValidation:rule="!self.url.matches('^[^:/]+://[^/?#]*@') && (!has(self.healthURL) || !self.healthURL.matches('^[^:/]+://[^/?#]*@'))",message="endpoint.url and endpoint.healthURL must not carry user information (user:password@ before the host): the host is what is checked, and a rig's credentials do not belong in its URL"
// +kubebuilder:validation:XValidation:rule="!self.url.lowerAscii().matches('^[a-z]+://(169\\\\.254\\\\.|\\\\[(::ffff:169\\\\.254\\\\.|fe[89ab][0-9a-f]:|::\\\\]|fd00:ec2::254\\\\])|0\\\\.0\\\\.0\\\\.0([:/?#]|$)|metadata(\\\\.google\\\\.internal|\\\\.goog)?\\\\.?([:/?#]|$)|100\\\\.100\\\\.100\\\\.200([:/?#]|$))')",message="endpoint.url must not name a link-local, unspecified or cloud-metadata address (169.254.0.0/16, fe80::/10, 0.0.0.0, metadata.google.internal…): the manager would fetch it from its own network position"
type RigEndpoint struct {
	// URL of the rig's MCP server (streamable HTTP), e.g. http://10.0.0.5:8048/mcp.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/\s]+(/\S*)?$`
	URL string `json:"url"`

	// HealthURL answers GET with the PhysiClaw status JSON, on the URL's host
	// (any port). Default: /api/status on the URL's host. Redirects are not
	// followed and at most 64 KiB of the answer is read.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/\s]+(/\S*)?$`
	// +optional
	HealthURL string `json:"healthURL,omitempty"`
}

// Phone describes the phone under the camera.
type Phone struct {
	// Platform of the phone.
	// +kubebuilder:validation:Enum=ios;android
	// +optional
	Platform string `json:"platform,omitempty"`
	// Model of the phone, e.g. "iPhone 15".
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Model string `json:"model,omitempty"`
}

// StateVolume is where the rig's state (memory, logs, jobs, skills, snapshots) lives.
// Exactly one source may be set; none means hostPath /var/lib/clawfarm/rigs/<namespace>/<name> on the rig's node.
// +kubebuilder:validation:XValidation:rule="!(has(self.hostPath) && has(self.persistentVolumeClaim))",message="set at most one of stateVolume.hostPath and stateVolume.persistentVolumeClaim"
type StateVolume struct {
	// HostPath is a directory on the rig's node.
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	HostPath string `json:"hostPath,omitempty"`
	// PersistentVolumeClaim names a claim in the rig's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PersistentVolumeClaim string `json:"persistentVolumeClaim,omitempty"`
}

// DeviceRigSpec is one phone rig: a phone, a camera and a stylus arm on one node.
// +kubebuilder:validation:XValidation:rule="!has(self.wakeUp) || !has(self.wakeUp.watchURL) || self.wakeUp.watchURL.lowerAscii().find('//(\\\\[[^\\\\]]*\\\\]|[^/:?#]+)') == self.endpoint.url.lowerAscii().find('//(\\\\[[^\\\\]]*\\\\]|[^/:?#]+)')",message="wakeUp.watchURL must be on the endpoint URL's host: the manager fetches it, so it may not point anywhere else"
type DeviceRigSpec struct {
	// NodeName is the node the rig is plugged into; loop pods are pinned there.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// Endpoint of the rig's MCP server.
	Endpoint RigEndpoint `json:"endpoint"`

	// Phone facts.
	// +optional
	Phone Phone `json:"phone,omitempty"`

	// Unschedulable puts the rig in maintenance: no new run takes it.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`

	// StateVolume holds the rig's state.
	// +optional
	StateVolume StateVolume `json:"stateVolume,omitempty"`

	// HostNetwork runs the rig's loop pods in their node's network
	// namespace, for a phone server on the rig host itself that listens on
	// the host's loopback (an endpoint on 127.0.0.1). It is the rig admin's
	// choice: a run cannot ask for it (docs/security.md).
	// +optional
	HostNetwork bool `json:"hostNetwork,omitempty"`

	// Skills are skill ConfigMaps every run on this rig gets.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Skills []SkillSource `json:"skills,omitempty"`

	// Bootstrap are ConfigMaps of context files every run on this rig gets
	// in its system prompt ("this phone's apps and accounts"), before the
	// run's own (docs/engine.md, "The system prompt").
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Bootstrap []BootstrapSource `json:"bootstrap,omitempty"`

	// WakeUp starts a run when the phone wakes: while the rig is free, its
	// watch route (GET /api/phone/watch) says when the screen changed — a
	// message arrived — and the operator creates an AgentRun from this
	// template on this rig, the watch's reason in its trigger: at most one
	// wake-up run at a time, at most one per minInterval
	// (docs/wake-ups.md).
	// +optional
	WakeUp *WakeUp `json:"wakeUp,omitempty"`
}

// WakeUp is the run a rig's phone starts when it wakes.
type WakeUp struct {
	// Template is the run a wake-up starts.
	Template WakeUpTemplate `json:"template"`

	// MinIntervalSeconds is the least time between two wake-up runs on the
	// rig, counted from the last one's creation; a wake inside it waits for
	// it to pass (the rig gateway keeps the wake until a session takes the
	// rig).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:default=60
	// +optional
	MinIntervalSeconds *int32 `json:"minIntervalSeconds,omitempty"`

	// WatchURL answers GET with {"wake": bool, "reason": "…"}, on the
	// endpoint URL's host. Default: the health URL with its /api/status
	// replaced by /api/phone/watch (on a rig gateway, the gateway's own
	// record of the rig's wakes), else /api/phone/watch on the URL's host.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/\s]+(/\S*)?$`
	// +optional
	WatchURL string `json:"watchURL,omitempty"`
}

// WakeUpTemplate is the AgentRun a wake-up creates, in the rig's namespace,
// with spec.rigRef this rig.
type WakeUpTemplate struct {
	// Labels and annotations the run gets, beside the operator's own.
	// +optional
	Metadata WakeUpMetadata `json:"metadata,omitempty"`
	// Spec of the run.
	Spec WakeUpRunSpec `json:"spec"`
}

// WakeUpMetadata is what a wake-up run carries of the template's metadata.
type WakeUpMetadata struct {
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WakeUpRunSpec is an AgentRun's spec without the rig (the waking rig) or
// cancel. The run's trigger is Trigger, a blank line, and what the watch
// said ("The phone woke: notification banner appeared at top of screen").
type WakeUpRunSpec struct {
	// Trigger opens the run, before the wake's reason. Default: look at
	// what arrived and deal with it, or end IDLE when nothing is new.
	// +kubebuilder:validation:MaxLength=8192
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="trigger may not contain a NUL character: it reaches the loop pod as an environment variable, which cannot hold one"
	// +optional
	Trigger string `json:"trigger,omitempty"`
	// QueueMode of the run (AgentRunSpec.queueMode): steer or collect
	// delivers a wake into a session that holds the rig by then.
	// +kubebuilder:default=queue
	// +optional
	QueueMode QueueMode `json:"queueMode,omitempty"`
	// Model drives the agent.
	Model ModelSpec `json:"model"`
	// +kubebuilder:default={}
	// +optional
	Limits RunLimits `json:"limits,omitempty"`
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Skills []SkillSource `json:"skills,omitempty"`
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Bootstrap []BootstrapSource `json:"bootstrap,omitempty"`
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="systemPromptAppend may not contain a NUL character: it reaches the loop pod as an environment variable, which cannot hold one"
	// +optional
	SystemPromptAppend string `json:"systemPromptAppend,omitempty"`
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	DenyTools []string `json:"denyTools,omitempty"`
	// +kubebuilder:default={}
	// +optional
	FollowUp FollowUpPolicy `json:"followUp,omitempty"`
	// TTLSecondsAfterFinished deletes the run this long after it finished.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// +optional
	Pod *PodOverrides `json:"pod,omitempty"`
}

// MinInterval is MinIntervalSeconds as a duration, 60 s when unset.
func (w *WakeUp) MinInterval() time.Duration {
	if w.MinIntervalSeconds == nil {
		return time.Minute
	}
	return time.Duration(*w.MinIntervalSeconds) * time.Second
}

// RigPhase is the rig's state as the operator sees it.
// +kubebuilder:validation:Enum=Ready;InUse;NotReady;Offline;Maintenance
type RigPhase string

// The phases of a rig.
const (
	RigReady       RigPhase = "Ready"
	RigInUse       RigPhase = "InUse"
	RigNotReady    RigPhase = "NotReady"
	RigOffline     RigPhase = "Offline"
	RigMaintenance RigPhase = "Maintenance"
)

// Serving reports whether a rig in this phase can run sessions: Ready, or
// InUse by one.
func (p RigPhase) Serving() bool { return p == RigReady || p == RigInUse }

// RigHealth is the last health report of the rig (GET /api/status): the
// rig server's own booleans, and the set-up steps it reports done
// (docs/rig-contract.md, "Health route").
type RigHealth struct {
	Arm    bool `json:"arm"`
	Camera bool `json:"camera"`
	// Bridge is true while the phone's bridge page polls the rig. It is
	// false during a task and whenever that page is in the background, so
	// it gates nothing: the BridgeConnected condition reports it.
	Bridge       bool `json:"bridge"`
	Calibrated   bool `json:"calibrated"`
	OriginPinned bool `json:"origin_pinned"`
	// Ready is the rig server's own verdict: set up and calibrated.
	Ready         bool `json:"ready"`
	LayoutLearned bool `json:"layout_learned"`
	// StepsDone are the set-up steps the rig reports done, in set-up order
	// (viewport_shift, rotation, mapping_a, mapping_b, focus, validated,
	// alignment, assistive_touch).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	StepsDone []string `json:"stepsDone,omitempty"`
	// AssistiveTouch is where the rig calibrated its AssistiveTouch button,
	// as it reports it ("(0.900, 0.880)", screen fractions).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	AssistiveTouch string `json:"assistiveTouch,omitempty"`
}

// DeviceRigStatus is what the operator observed of the rig.
type DeviceRigStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase of the rig. InUse while a run holds the rig's Lease: the Lease,
	// named after the rig and labelled farm.clawfarm.dev/run, names the
	// run, and so does that run's status.rig. A Lease that passes straight
	// from one run to the next leaves the phase, and this status, as they are.
	// +optional
	Phase RigPhase `json:"phase,omitempty"`
	// Health is the last health report.
	// +optional
	Health *RigHealth `json:"health,omitempty"`
	// LastProbeTime is when the health route was last asked and its answer
	// recorded. A probe that finds nothing new writes nothing, so on an idle
	// rig this moves about once every 5 minutes, not at every probe.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// Conditions: Ready, NodeReady, EndpointReachable, Calibrated,
	// BridgeConnected (reported, gates nothing), and
	// Stalled, which kstatus reads: True while the rig is NotReady or Offline
	// (the reason and message are Ready's), False otherwise.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// WakeUp is the rig's last wake-up: when the phone woke, why, and the
	// run it started.
	// +optional
	WakeUp *WakeUpStatus `json:"wakeUp,omitempty"`
}

// WakeUpStatus is a rig's last wake-up.
type WakeUpStatus struct {
	// Time the wake-up run was created.
	Time metav1.Time `json:"time"`
	// Reason is what the rig's watch said.
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// Run is the AgentRun it started.
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run"`
	// Count is how many wake-up runs the rig has started.
	// +optional
	Count int64 `json:"count,omitempty"`
}

// DeviceRig is one phone rig: a phone under a camera and a stylus arm, on one node,
// served as an MCP server.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rig,categories=clawfarm
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Platform",type=string,JSONPath=`.spec.phone.platform`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint.url`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it names the rig's Lease and labels its pods"
type DeviceRig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeviceRigSpec   `json:"spec,omitempty"`
	Status DeviceRigStatus `json:"status,omitempty"`
}

// DeviceRigList is a list of DeviceRigs.
// +kubebuilder:object:root=true
type DeviceRigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeviceRig `json:"items"`
}
