// Command manager is the clawfarm operator: the AgentRun and DeviceRig
// controllers, metrics, health probes and leader election. `manager followup`
// is the one-shot command a follow-up CronJob's Job runs.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/controllers/devicerig"
	"github.com/clawfarm/clawfarm/controllers/toolpolicy"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "followup" {
		os.Exit(runFollowUp(os.Args[2:]))
	}
	os.Exit(runManager(os.Args[1:]))
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	must(farmv1.AddToScheme(s))
	return s
}

// managerFlags are the manager's flags; the Helm chart's Deployment passes
// them (a test parses the chart's args with this same set).
type managerFlags struct {
	fs                             *flag.FlagSet
	metricsAddr, probeAddr         *string
	pprofAddr                      *string
	metricsSecure                  *bool
	metricsCertDir                 *string
	watchNamespaces                *string
	shard, shardName               *string
	leaderElect                    *bool
	leaderNamespace                *string
	leaseDuration, renewDeadline   *time.Duration
	retryPeriod                    *time.Duration
	loopImage, loopSA, pullPolicy  *string
	managerImage, followupSA       *string
	startupTimeout, nodeLostGrace  *time.Duration
	agentJobTTL                    *time.Duration
	attemptBackoff, rigNotReady    *time.Duration
	probeInterval, probeTimeout    *time.Duration
	runWorkers, rigWorkers         *int
	traceURL, traceAudience        *string
	traceKeep                      *int
	loopAPIServer                  *string
	otel                           otelFlags
	pricingConfigMap               *string
	loopResources, fuResources     *jsonFlag[corev1.ResourceRequirements]
	loopSecurity, fuSecurity       *jsonFlag[corev1.SecurityContext]
	loopPodSecurity, fuPodSecurity *jsonFlag[corev1.PodSecurityContext]
	zap                            *zap.Options
}

func newManagerFlags() *managerFlags {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	f := &managerFlags{fs: fs,
		metricsAddr:      fs.String("metrics-bind-address", ":8080", "address the metrics endpoint binds to; 0 disables it"),
		metricsSecure:    fs.Bool("metrics-secure", true, "serve metrics over HTTPS to callers whose token may get /metrics (a TokenReview and a SubjectAccessReview per caller); false: plain HTTP to anyone"),
		metricsCertDir:   fs.String("metrics-cert-dir", "", "directory with the metrics endpoint's tls.crt and tls.key; empty: a self-signed certificate"),
		watchNamespaces:  fs.String("watch-namespaces", "", "comma-separated namespaces whose AgentRuns, DeviceRigs, pods, Leases and CronJobs the manager watches and caches (the run namespaces); empty: every namespace"),
		shard:            fs.String("shard", "", "label selector on "+farmv1.LabelPool+" (e.g. '"+farmv1.LabelPool+" in (a,b)'): this manager caches and reconciles only the AgentRuns and DeviceRigs it matches, and what the operator made for them; empty: every pool (docs/sharding.md)"),
		shardName:        fs.String("shard-name", "", "the shard's name, in its leader-election Lease (clawfarm-manager-<name>.farm.clawfarm.dev), so that each shard — by --shard, or by disjoint --watch-namespaces — elects its own leader; default with --shard: one derived from the selector, without: none (clawfarm-manager.farm.clawfarm.dev)"),
		probeAddr:        fs.String("health-probe-bind-address", ":8081", "address the health probes bind to"),
		pprofAddr:        fs.String("pprof-bind-address", "", "address Go's pprof profiles are served on, unauthenticated (e.g. 127.0.0.1:6060 to profile the manager); empty: not served"),
		leaderElect:      fs.Bool("leader-elect", false, "enable leader election (use it with more than one replica)"),
		leaderNamespace:  fs.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's)"),
		leaseDuration:    fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a standby waits, after the leader stops renewing, before it takes over"),
		renewDeadline:    fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it gives up leading"),
		retryPeriod:      fs.Duration("leader-elect-retry-period", 2*time.Second, "how often leader-election clients try to acquire or renew"),
		loopImage:        fs.String("loop-image", "ghcr.io/clawfarm/loop:latest", "default image of loop pods"),
		loopSA:           fs.String("loop-service-account", "clawfarm-loop", "default service account of loop pods (needs patch on agentruns/status)"),
		pullPolicy:       fs.String("image-pull-policy", "IfNotPresent", "image pull policy of loop pods and follow-up Jobs"),
		managerImage:     fs.String("manager-image", "ghcr.io/clawfarm/manager:latest", "image that runs `manager followup` in follow-up Jobs"),
		followupSA:       fs.String("followup-service-account", "clawfarm-followup", "service account of follow-up Jobs (the clawfarm-followup role: get, create and patch agentruns, get devicerigs, get and delete cronjobs, create events)"),
		agentJobTTL:      fs.Duration("agent-job-ttl", followup.DefaultAgentJobTTL, "how long an agent's periodic job makes runs after the session that created it; then its CronJob is deleted at its next firing"),
		startupTimeout:   fs.Duration("pod-startup-timeout", 5*time.Minute, "a loop pod Pending this long counts as never started (a free retry)"),
		nodeLostGrace:    fs.Duration("node-lost-grace", 5*time.Minute, "a node NotReady this long is reported in its runs' status; their attempts still count as alive until the node reports again, is deleted, or is tainted node.kubernetes.io/out-of-service"),
		rigNotReady:      fs.Duration("rig-not-ready-grace", 5*time.Minute, "a run keeps a rig that is not Ready, with no attempt on it, this long; then it gives the rig back and queues again"),
		attemptBackoff:   fs.Duration("attempt-backoff", 10*time.Second, "the wait before a fresh attempt after the first ended STUCK, doubled for each attempt after, at most 5m"),
		probeInterval:    fs.Duration("rig-probe-interval", 15*time.Second, "how often each rig's health route is asked"),
		probeTimeout:     fs.Duration("rig-probe-timeout", 3*time.Second, "how long one rig health probe may take"),
		runWorkers:       fs.Int("agentrun-workers", 8, "concurrent AgentRun reconciles"),
		traceURL:         fs.String("trace-url", "", "the trace server's URL, as loop pods reach it (e.g. http://clawfarm-server.clawfarm-system.svc:8080); empty: traces stay on the rigs' nodes"),
		traceAudience:    fs.String("trace-audience", contract.DefaultTraceAudience, "audience of the token projected into loop pods for the trace server"),
		traceKeep:        fs.Int("rig-trace-keep", 20, "attempts whose trace each rig's state directory keeps; older ones are pruned"),
		loopAPIServer:    fs.String("loop-api-server", "", "host:port where loop pods reach the API server, for nodes without a Service proxy (e.g. host-network pods on a node without kube-proxy); empty: the kubernetes Service, as the kubelet tells pods"),
		pricingConfigMap: fs.String("pricing-configmap", "", "namespace/name of the ConfigMap whose key prices.yaml maps model names to prices in USD per million tokens ({input, cachedInput, cacheWrite, output}); it prices the runs without spec.model.pricing. Empty: none"),
		rigWorkers:       fs.Int("devicerig-workers", 4, "concurrent DeviceRig reconciles (probes run inside them)"),
		loopResources:    &jsonFlag[corev1.ResourceRequirements]{check: checkResources},
		fuResources:      &jsonFlag[corev1.ResourceRequirements]{check: checkResources},
		loopSecurity:     &jsonFlag[corev1.SecurityContext]{check: checkSecurityContext},
		fuSecurity:       &jsonFlag[corev1.SecurityContext]{check: checkSecurityContext},
		loopPodSecurity:  &jsonFlag[corev1.PodSecurityContext]{check: checkPodSecurityContext},
		fuPodSecurity:    &jsonFlag[corev1.PodSecurityContext]{check: checkPodSecurityContext},
		zap:              &zap.Options{},
	}
	fs.Var(f.loopResources, "loop-resources", `resources of the loop container, the JSON of a core/v1 ResourceRequirements (e.g. {"requests":{"cpu":"250m","memory":"256Mi"}}); a run's spec.pod.resources replaces it`)
	fs.Var(f.loopSecurity, "loop-security-context", "securityContext of the loop container, the JSON of a core/v1 SecurityContext")
	fs.Var(f.loopPodSecurity, "loop-pod-security-context", "securityContext of loop pods, the JSON of a core/v1 PodSecurityContext (the user must be able to write the rig's state directory on its node)")
	fs.Var(f.fuResources, "followup-resources", "resources of the follow-up Jobs' container, the JSON of a core/v1 ResourceRequirements")
	fs.Var(f.fuSecurity, "followup-security-context", "securityContext of the follow-up Jobs' container, the JSON of a core/v1 SecurityContext")
	fs.Var(f.fuPodSecurity, "followup-pod-security-context", "securityContext of the follow-up Jobs' pods, the JSON of a core/v1 PodSecurityContext")
	f.otel = addOTelFlags(fs)
	f.zap.BindFlags(fs)
	return f
}

// parse parses args and checks what the flag package cannot. Every error
// names the flag and is written to the flag set's output, as the flag
// package writes its own.
func (f *managerFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	switch p := corev1.PullPolicy(*f.pullPolicy); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		err := fmt.Errorf("invalid value %q for flag -image-pull-policy: want Always, IfNotPresent or Never", p)
		fmt.Fprintln(f.fs.Output(), err)
		return err
	}
	if u := *f.traceURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			err := fmt.Errorf("invalid value %q for flag -trace-url: want an http(s) URL", u)
			fmt.Fprintln(f.fs.Output(), err)
			return err
		}
	}
	for _, ns := range contract.SplitList(*f.watchNamespaces) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			err := fmt.Errorf("invalid value %q for flag -watch-namespaces: %q is not a namespace name: %s", *f.watchNamespaces, ns, strings.Join(errs, "; "))
			fmt.Fprintln(f.fs.Output(), err)
			return err
		}
	}
	if _, err := f.shardSelector(); err != nil {
		fmt.Fprintln(f.fs.Output(), err)
		return err
	}
	if n := *f.shardName; n != "" {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 || len(n) > maxShardName {
			err := fmt.Errorf("invalid value %q for flag -shard-name: want a DNS label of at most %d characters", n, maxShardName)
			fmt.Fprintln(f.fs.Output(), err)
			return err
		}
	}
	if _, err := f.pricingList(); err != nil {
		fmt.Fprintln(f.fs.Output(), err)
		return err
	}
	if err := f.otel.check(); err != nil {
		fmt.Fprintln(f.fs.Output(), err)
		return err
	}
	if *f.traceKeep < 1 {
		err := fmt.Errorf("invalid value %d for flag -rig-trace-keep: want at least 1", *f.traceKeep)
		fmt.Fprintln(f.fs.Output(), err)
		return err
	}
	if a := *f.loopAPIServer; a != "" {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			err := fmt.Errorf("invalid value %q for flag -loop-api-server: want host:port (e.g. 10.0.0.5:6443)", a)
			fmt.Fprintln(f.fs.Output(), err)
			return err
		}
	}
	return nil
}

// maxShardName leaves room for the chart's Deployment name
// (<release>-manager-<shard>) and keeps the leader-election Lease's name
// short.
const maxShardName = 30

// shardSelector is --shard (nil: no sharding).
func (f *managerFlags) shardSelector() (labels.Selector, error) {
	sel, err := agentrun.ParseShard(*f.shard)
	if err != nil {
		return nil, fmt.Errorf("invalid value %q for flag -shard: %v", *f.shard, err)
	}
	return sel, nil
}

// leaderElectionID is the name of the leader-election Lease: one per shard,
// so that each shard's replicas elect their own leader and the shards run
// side by side; --shard-name alone names a shard by namespace
// (--watch-namespaces). Without either it is the unsharded manager's name.
func (f *managerFlags) leaderElectionID() string {
	const id = "clawfarm-manager.farm.clawfarm.dev"
	sel, _ := f.shardSelector() // checked by parse
	name := *f.shardName
	if name == "" && sel == nil {
		return id
	}
	if name == "" {
		sum := sha256.Sum256([]byte(sel.String())) // the canonical form: the same shard, the same name
		name = "shard-" + hex.EncodeToString(sum[:5])
	}
	return "clawfarm-manager-" + name + ".farm.clawfarm.dev"
}

// pricingList is the price list ConfigMap --pricing-configmap names (an
// empty name: none).
func (f *managerFlags) pricingList() (types.NamespacedName, error) {
	v := *f.pricingConfigMap
	if v == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, fmt.Errorf("invalid value %q for flag -pricing-configmap: want namespace/name of a ConfigMap", v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// podDefaults are what the flags say of the pods the manager creates: loop
// pods and follow-up Jobs.
func (f *managerFlags) podDefaults() (attempt.Defaults, followup.JobDefaults) {
	pull := corev1.PullPolicy(*f.pullPolicy)
	return attempt.Defaults{
			Image: *f.loopImage, ServiceAccountName: *f.loopSA, ImagePullPolicy: pull,
			Resources: resources(f.loopResources), SecurityContext: f.loopSecurity.get(), PodSecurityContext: f.loopPodSecurity.get(),
			TraceURL: *f.traceURL, TraceAudience: *f.traceAudience, TraceKeep: *f.traceKeep,
			APIServer: *f.loopAPIServer, OTel: f.otel.defaults(),
		}, followup.JobDefaults{
			Image: *f.managerImage, ServiceAccountName: *f.followupSA, AgentJobTTL: *f.agentJobTTL, ImagePullPolicy: pull,
			Resources: resources(f.fuResources), SecurityContext: f.fuSecurity.get(), PodSecurityContext: f.fuPodSecurity.get(),
		}
}

func runManager(args []string) int {
	f := newManagerFlags()
	if err := f.parse(args); err != nil {
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(f.zap)))
	log := ctrl.Log.WithName("setup")

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), f.managerOptions())
	if err != nil {
		log.Error(err, "cannot create the manager")
		return 1
	}
	if err := setup(mgr, f.settings()); err != nil {
		log.Error(err, "cannot set up the controllers")
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "cannot add the health check")
		return 1
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "cannot add the ready check")
		return 1
	}
	log.Info("starting the manager", "loopImage", *f.loopImage, "leaderElection", *f.leaderElect, "shard", *f.shard, "leaderElectionID", f.leaderElectionID())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "the manager stopped")
		return 1
	}
	return 0
}

// managerOptions are the manager's options, as its flags make them (a test
// starts a manager with them, its metrics endpoint included).
func (f *managerFlags) managerOptions() ctrl.Options {
	return ctrl.Options{
		Scheme:                  newScheme(),
		Metrics:                 f.metricsOptions(),
		Cache:                   f.cacheOptions(),
		HealthProbeBindAddress:  *f.probeAddr,
		PprofBindAddress:        *f.pprofAddr,
		LeaderElection:          *f.leaderElect,
		LeaderElectionID:        f.leaderElectionID(),
		LeaderElectionNamespace: *f.leaderNamespace,
		LeaseDuration:           f.leaseDuration,
		RenewDeadline:           f.renewDeadline,
		RetryPeriod:             f.retryPeriod,
	}
}

// settings are the controllers' settings, as the flags make them.
func (f *managerFlags) settings() Settings {
	loop, fu := f.podDefaults()
	prices, _ := f.pricingList()  // checked by parse
	shard, _ := f.shardSelector() // checked by parse
	return Settings{
		Loop:           loop,
		FollowUp:       fu,
		StartupTimeout: *f.startupTimeout, NodeLostGrace: *f.nodeLostGrace, AttemptBackoff: *f.attemptBackoff, RigNotReadyGrace: *f.rigNotReady,
		ProbeInterval: *f.probeInterval, ProbeTimeout: *f.probeTimeout,
		RunWorkers: *f.runWorkers, RigWorkers: *f.rigWorkers,
		PricingConfigMap: prices,
		Shard:            shard,
	}
}

// Settings are the manager's controller settings.
type Settings struct {
	Loop                        attempt.Defaults
	FollowUp                    followup.JobDefaults
	StartupTimeout              time.Duration
	NodeLostGrace               time.Duration
	AttemptBackoff              time.Duration
	RigNotReadyGrace            time.Duration
	ProbeInterval, ProbeTimeout time.Duration
	RunWorkers, RigWorkers      int
	// PricingConfigMap holds the manager's price list (empty: none).
	PricingConfigMap types.NamespacedName
	// Shard is the manager's shard (--shard; nil: no sharding).
	Shard labels.Selector
}

func setup(mgr ctrl.Manager, s Settings) error {
	if err := (&agentrun.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("agentrun-controller"),
		Config: agentrun.Config{Loop: s.Loop, FollowUp: s.FollowUp, StartupTimeout: s.StartupTimeout,
			NodeLostGrace: s.NodeLostGrace, AttemptBackoff: s.AttemptBackoff, RigNotReadyGrace: s.RigNotReadyGrace, MaxConcurrentReconciles: s.RunWorkers,
			PricingConfigMap: s.PricingConfigMap, Shard: s.Shard},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agentrun controller: %w", err)
	}
	if err := (&devicerig.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig-controller"),
		Config: devicerig.Config{ProbeInterval: s.ProbeInterval, ProbeTimeout: s.ProbeTimeout, MaxConcurrentReconciles: s.RigWorkers},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("devicerig controller: %w", err)
	}
	if err := (&toolpolicy.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("toolpolicy controller: %w", err)
	}
	if err := metrics.Registry.Register(version.BuildInfo()); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	return metrics.Registry.Register(agentrun.NewRunPhaseCollector(mgr.GetClient()))
}

// runFollowUp is `manager followup`: create the AgentRun the Job's request
// names, if its parent still wants it (followup.Create). A refusal is final:
// it is logged here, told in an Event, and exits followup.ExitRefused, which
// the Job's pod failure policy does not retry.
func runFollowUp(args []string) int {
	fs := flag.NewFlagSet("manager followup", flag.ContinueOnError)
	timeout := fs.Duration("timeout", time.Minute, "how long to try")
	if err := fs.Parse(args); err != nil {
		return followup.ExitBadRequest
	}
	req, err := followup.DecodeRequest(os.Getenv(followup.EnvRequest))
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager followup:", err)
		return followup.ExitBadRequest
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager followup: no cluster config:", err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager followup:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	name, err := followup.Create(ctx, c, req, os.Getenv(followup.EnvJobName))
	var refused *followup.Refused
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(os.Stderr, "manager followup: refused to create run %s/%s: %s\n", req.Run.Namespace, name, refused.Message)
		if refused.Unrecorded != nil {
			fmt.Fprintln(os.Stderr, "manager followup: after the refusal:", refused.Unrecorded)
		}
		return followup.ExitRefused
	case err != nil:
		fmt.Fprintln(os.Stderr, "manager followup:", err)
		return 1
	}
	fmt.Printf("follow-up run %s/%s exists\n", req.Run.Namespace, name)
	return 0
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// metricsOptions serves the metrics endpoint as kubebuilder's secure
// scaffold does: HTTPS, each caller's token reviewed and its right to get
// /metrics checked by the API server (the chart's metrics-reader role
// grants it; metricsAuth), and HTTP/2 off (its rapid-reset and stream
// attacks).
func (f *managerFlags) metricsOptions() metricsserver.Options {
	o := metricsserver.Options{BindAddress: *f.metricsAddr}
	if !*f.metricsSecure {
		return o
	}
	o.SecureServing = true
	o.FilterProvider = metricsAuth
	o.CertDir = *f.metricsCertDir
	o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return o
}

// cacheOptions is the manager's cache: the run namespaces with
// --watch-namespaces, only the objects the operator labels, and with
// --shard only the shard's.
func (f *managerFlags) cacheOptions() cache.Options {
	shard, _ := f.shardSelector() // checked by parse
	return agentrun.CacheOptions(contract.SplitList(*f.watchNamespaces), shard)
}
