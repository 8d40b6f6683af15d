package admission_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

const notAllowedEndpoint = "is not an allowed model endpoint"

// runCreator is a team member bound to clawfarm-run-editor in a fresh
// namespace, as the built-in edit role grants it.
func runCreator(t *testing.T) (ns string, c client.Client) {
	t.Helper()
	ns = env.Namespace(t)
	name := "alice-" + ns
	bind(t, ns, "clawfarm-run-editor", user(name))
	return ns, as(t, identity{user: name, groups: []string{"team-a"}})
}

func withBaseURL(run *farmv1.AgentRun, url string) *farmv1.AgentRun {
	run.Spec.Model.Provider, run.Spec.Model.BaseURL = "openai-compatible", url
	return run
}

// A run's API key goes wherever spec.model.baseURL points: a run creator who
// may use a model key but not read it could otherwise send it to a server of
// theirs.
func TestModelEndpointAllowList(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	inForce(t, "clawfarm-agentrun-spec", notAllowedEndpoint, func() error {
		return alice.Create(ctx, withBaseURL(newRun(ns, "probe"), "https://collector.example.com/v1"))
	})

	for i, url := range []string{
		"https://collector.example.com/v1",
		"https://api.anthropic.com.collector.example.com/v1", // a preset's host as a prefix of another host
		"https://api.openai.com@collector.example.com/v1",    // a preset's host as user info
		"https://api.openai.com:8443/v1",                     // another port of a preset's host
		"https://api.openai.com/v2",                          // beside the preset's path
		"http://collector.team-a.svc.example.com/v1",         // a Service's name as a prefix of another host
		"http://10.0.0.7:8000/v1",                            // an address
	} {
		err := alice.Create(ctx, withBaseURL(newRun(ns, "bad-"+string(rune('a'+i))), url))
		refused(t, "baseURL "+url, err, "spec.model.baseURL "+url+" "+notAllowedEndpoint+": use one under https://api.openai.com/v1, https://api.anthropic.com")
	}

	allowed(t, "no baseURL (the preset's endpoint)", alice.Create(ctx, newRun(ns, "preset")))
	for i, url := range []string{
		"https://api.openai.com/v1",
		"https://api.openai.com/v1/",
		"https://api.anthropic.com",
		"https://generativelanguage.googleapis.com/v1beta/openai",
		"http://vllm.models.svc:8000/v1",
		"https://vllm.models.svc.cluster.local/v1",
		"http://ollama.team-a.svc",
	} {
		allowed(t, "baseURL "+url, alice.Create(ctx, withBaseURL(newRun(ns, "good-"+string(rune('a'+i))), url)))
	}

	// A run not yet started may be edited, but not pointed elsewhere.
	var run farmv1.AgentRun
	if err := alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "good-a"}, &run); err != nil {
		t.Fatal(err)
	}
	run.Spec.Model.BaseURL = "https://collector.example.com/v1"
	refused(t, "an update to a pending run's baseURL", alice.Update(ctx, &run), notAllowedEndpoint)

	// The allow-list is the ConfigMap's: a farm administrator adds an endpoint.
	var params corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: paramsName}, &params); err != nil {
		t.Fatal(err)
	}
	params.Data["modelBaseURLPrefixes"] += "\nhttps://llm.example.org/v1"
	if err := k8s.Update(ctx, &params); err != nil {
		t.Fatal(err)
	}
	eventually(t, "an endpoint added to the ConfigMap", func() error {
		return alice.Create(ctx, withBaseURL(newRun(ns, "added"), "https://llm.example.org/v1"))
	})
}

// A loop image or ServiceAccount of the run's own is code or an identity the
// farm did not choose: only in namespaces a cluster administrator labelled
// farm.clawfarm.dev/custom-pods=true, and the image from an allowed registry.
func TestCustomLoopPods(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	withPod := func(name string, pod farmv1.PodOverrides) *farmv1.AgentRun {
		run := newRun(ns, name)
		run.Spec.Pod = &pod
		return run
	}
	const noCustom = "does not allow custom loop pods"
	inForce(t, "clawfarm-agentrun-spec", noCustom, func() error {
		return alice.Create(ctx, withPod("probe", farmv1.PodOverrides{Image: "ghcr.io/clawfarm/loop:dev"}))
	})

	refused(t, "an image of the farm's registry in an unlabelled namespace",
		alice.Create(ctx, withPod("image", farmv1.PodOverrides{Image: "ghcr.io/clawfarm/loop:dev"})),
		"spec.pod.image is set, but namespace "+ns+" "+noCustom+": remove spec.pod.image")
	refused(t, "a ServiceAccount in an unlabelled namespace",
		alice.Create(ctx, withPod("sa", farmv1.PodOverrides{ServiceAccountName: "deployer"})),
		"spec.pod.serviceAccountName is set, but namespace "+ns+" "+noCustom+": remove spec.pod.serviceAccountName")
	allowed(t, "resources only in an unlabelled namespace", alice.Create(ctx, withPod("resources", farmv1.PodOverrides{
		Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}})))

	// The team cannot label its own namespace.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"farm.clawfarm.dev/custom-pods":"true"}}}`))
	refused(t, "the run creator labels its namespace", alice.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, patch), "forbidden")

	// A cluster administrator does.
	var nsObj corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["farm.clawfarm.dev/custom-pods"] = "true"
	if err := k8s.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a custom image in the labelled namespace", func() error {
		return alice.Create(ctx, withPod("image", farmv1.PodOverrides{Image: "ghcr.io/clawfarm/loop:dev"}))
	})
	allowed(t, "a ServiceAccount in the labelled namespace", alice.Create(ctx, withPod("sa", farmv1.PodOverrides{ServiceAccountName: "deployer"})))
	allowed(t, "an image by digest", alice.Create(ctx, withPod("digest", farmv1.PodOverrides{
		Image: "ghcr.io/clawfarm/loop@sha256:0000000000000000000000000000000000000000000000000000000000000000"})))
	for i, image := range []string{"docker.io/attacker/loop:latest", "ghcr.io/clawfarmer/loop:dev", "loop:latest"} {
		refused(t, "image "+image+" in the labelled namespace",
			alice.Create(ctx, withPod("other-"+string(rune('a'+i)), farmv1.PodOverrides{Image: image})),
			"spec.pod.image "+image+" is not from an allowed registry: use an image under ghcr.io/clawfarm/")
	}
}

// DeviceRigs are a farm administrator's: a run creator may read them but
// not write them, and even an administrator's rig keeps its hostPath state
// volume under the rigs' directory.
func TestRigStateVolume(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	admin := "rick-" + ns
	bind(t, ns, "clawfarm-rig-admin", user(admin))
	rick := as(t, identity{user: admin})
	const outside = "is outside the rigs' directory"
	inForce(t, "clawfarm-devicerig-state", outside, func() error {
		return rick.Create(ctx, newRig(ns, "probe", farmv1.StateVolume{HostPath: "/"}))
	})

	for i, c := range []struct{ path, want string }{
		{"/", outside},
		{"/etc", outside},
		{"/var/lib/kubelet/pods", outside},
		{"/var/lib/clawfarm/rigs", outside},
		{"/var/lib/clawfarm/rigs/", outside},
		{"/var/lib/clawfarm/rigsx/iphone", outside},
		{"/var/lib/clawfarm/rigs/../../../etc", "has a . or .. segment"},
		{"/var/lib/clawfarm/rigs/iphone-01/..", "has a . or .. segment"},
		{"/var/lib/clawfarm/rigs/.", "has a . or .. segment"},
	} {
		err := rick.Create(ctx, newRig(ns, "bad-"+string(rune('a'+i)), farmv1.StateVolume{HostPath: c.path}))
		refused(t, "hostPath "+c.path, err, "spec.stateVolume.hostPath "+c.path+" "+c.want)
	}
	allowed(t, "the default state volume", rick.Create(ctx, newRig(ns, "iphone-01", farmv1.StateVolume{})))
	allowed(t, "a directory under the rigs' directory", rick.Create(ctx, newRig(ns, "iphone-02", farmv1.StateVolume{HostPath: "/var/lib/clawfarm/rigs/iphone-02"})))
	allowed(t, "a claim", rick.Create(ctx, newRig(ns, "iphone-03", farmv1.StateVolume{PersistentVolumeClaim: "iphone-03-state"})))

	var rig farmv1.DeviceRig
	if err := rick.Get(ctx, client.ObjectKey{Namespace: ns, Name: "iphone-02"}, &rig); err != nil {
		t.Fatal(err)
	}
	rig.Spec.StateVolume.HostPath = "/root"
	refused(t, "an update moving the state volume to /root", rick.Update(ctx, &rig), outside)
	rig.Spec.StateVolume.HostPath = "/var/lib/clawfarm/rigs/iphone-02"
	rig.Spec.Unschedulable = true
	allowed(t, "maintenance on a rig", rick.Update(ctx, &rig))

	var rigs farmv1.DeviceRigList
	allowed(t, "the run creator lists rigs", alice.List(ctx, &rigs, client.InNamespace(ns)))
	refused(t, "the run creator creates a rig", alice.Create(ctx, newRig(ns, "mine", farmv1.StateVolume{})), "forbidden")
	refused(t, "the run creator edits a rig", alice.Patch(ctx, &rig, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodeName":"other"}}`))), "forbidden")

	viewer := "victor-" + ns
	bind(t, ns, "clawfarm-run-viewer", user(viewer))
	victor := as(t, identity{user: viewer})
	var runs farmv1.AgentRunList
	allowed(t, "the viewer lists runs", victor.List(ctx, &runs, client.InNamespace(ns)))
	allowed(t, "the viewer lists rigs", victor.List(ctx, &rigs, client.InNamespace(ns)))
	refused(t, "the viewer creates a run", victor.Create(ctx, newRun(ns, "viewer-run")), "forbidden")
	mine := newRun(ns, "mine")
	allowed(t, "the run creator creates a run", alice.Create(ctx, mine))
	refused(t, "the run creator writes its run's status", alice.Status().Patch(ctx, mine,
		client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Succeeded"}}`))), "forbidden")
}

// Without its ConfigMap the AgentRun policy refuses every AgentRun write
// (parameterNotFoundAction: Deny): an allow-list that is gone allows nothing.
func TestMissingAllowListRefusesRuns(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	var params corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: paramsName}, &params); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, &params); err != nil {
		t.Fatal(err)
	}
	inForce(t, "clawfarm-agentrun-spec without its ConfigMap", "no params found for policy binding", func() error {
		return alice.Create(ctx, newRun(ns, "probe"))
	})
	refused(t, "a run with no baseURL while the allow-list is missing", alice.Create(ctx, newRun(ns, "preset")), "no params found for policy binding")

	params.ResourceVersion, params.UID, params.CreationTimestamp = "", "", metav1.Time{}
	if err := k8s.Create(ctx, &params); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a run once the ConfigMap is back", func() error { return alice.Create(ctx, newRun(ns, "preset")) })
}

// A farm that knows its rig network keeps rig endpoints in it
// (admission.rigs.endpointCIDRs and endpointHosts): with both empty any host
// the schema admits is allowed; with either set, a DeviceRig naming another
// host is refused, with the lists in the message.
func TestRigEndpointAllowList(t *testing.T) {
	ctx := context.Background()
	ns, _ := runCreator(t)
	admin := "rita-" + ns
	bind(t, ns, "clawfarm-rig-admin", user(admin))
	rita := as(t, identity{user: admin})
	at := func(name, url string) *farmv1.DeviceRig {
		r := newRig(ns, name, farmv1.StateVolume{})
		r.Spec.Endpoint.URL = url
		return r
	}
	allowed(t, "any rig host while the lists are empty", rita.Create(ctx, at("anywhere", "http://192.168.7.9:8048/mcp")))

	var params corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: paramsName}, &params); err != nil {
		t.Fatal(err)
	}
	restore := params.DeepCopy()
	params.Data["rigEndpointCIDRs"] = "10.20.0.0/16\nfd12:3456::/32"
	params.Data["rigEndpointHosts"] = "*.farm.lan\nrig-host-1"
	if err := k8s.Update(ctx, &params); err != nil {
		t.Fatal(err)
	}
	defer func() {
		var cur corev1.ConfigMap
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(restore), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Data = restore.Data
		if err := k8s.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
		eventually(t, "rigs anywhere again once the lists are empty", func() error {
			r := at("anywhere-again", "http://192.168.7.10:8048/mcp")
			if err := rita.Create(ctx, r); err != nil {
				return err
			}
			return rita.Delete(ctx, r)
		})
	}()
	const outside = "which is not among the farm's rig endpoints"
	inForce(t, "clawfarm-devicerig-endpoint", outside, func() error {
		return rita.Create(ctx, at("probe", "http://192.168.7.9:8048/mcp"))
	})
	for _, c := range []struct{ name, url, host string }{
		{"other-lan", "http://192.168.7.9:8048/mcp", "192.168.7.9"},
		{"next-to-cidr", "http://10.21.0.1:8048/mcp", "10.21.0.1"},
		{"other-domain", "http://rig.farm.lan.evil.example:8048/mcp", "rig.farm.lan.evil.example"},
		{"other-v6", "http://[fd12:3457::1]:8048/mcp", "fd12:3457::1"},
	} {
		refused(t, "endpoint "+c.url, rita.Create(ctx, at(c.name, c.url)), "spec.endpoint.url names host "+c.host+", "+outside+
			" (addresses in 10.20.0.0/16, fd12:3456::/32; hosts *.farm.lan, rig-host-1)")
	}
	for _, c := range []struct{ name, url string }{
		{"in-cidr", "http://10.20.3.4:8048/mcp"},
		{"in-v6", "http://[fd12:3456::7]:8048/mcp"},
		{"in-domain", "http://iphone-03.Farm.LAN:8048/mcp"},
		{"listed-host", "http://rig-host-1:8048/mcp"},
	} {
		allowed(t, "endpoint "+c.url, rita.Create(ctx, at(c.name, c.url)))
	}
	// A rig admitted before the lists tightened can still be edited, as long
	// as its endpoint stays where it is.
	var old farmv1.DeviceRig
	if err := rita.Get(ctx, client.ObjectKey{Namespace: ns, Name: "anywhere"}, &old); err != nil {
		t.Fatal(err)
	}
	old.Spec.Unschedulable = true
	allowed(t, "maintenance on a rig outside the lists", rita.Update(ctx, &old))
	old.Spec.Endpoint.URL = "http://192.168.7.99:8048/mcp"
	refused(t, "moving a rig to another host outside the lists", rita.Update(ctx, &old), outside)
}
