package rignode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The test binary doubles as the program pods run: with RIGNODE_TEST_HELPER=1
// in its environment it acts out the mode its first argument names.
const helperImage = "example.com/helper:v1"

var (
	restCfg  *rest.Config
	cs       kubernetes.Interface
	provider *rignode.Provider
	nodeName = "rig-host-1"
	nodePort int
	// rootDir is the provider's root directory.
	rootDir string
)

func TestMain(m *testing.M) {
	// The test binary is rignode here, so it is also the shim rignode starts.
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(rignode.RunShim(os.Args[2:]))
	}
	if os.Getenv("RIGNODE_TEST_HELPER") == "1" {
		os.Exit(helper(os.Args[1:]))
	}
	testenv.MainNeeds(testenv.Assets)
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	env := &envtest.Environment{}
	var err error
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cs = kubernetes.NewForConfigOrDie(restCfg)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root, err := os.MkdirTemp("", "rignode-test-")
	rootDir = root
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		// Pods a test left running (their shims outlive rignode by design)
		// are stopped, so the suite leaves no process behind.
		if n := rignode.StopLeftovers(root, 5*time.Second); n > 0 {
			fmt.Fprintf(os.Stderr, "stopped %d pod process(es) the tests left running\n", n)
		}
		_ = os.RemoveAll(root)
	}()
	nodePort = freePort()
	taints, _ := rignode.ParseTaints("farm.clawfarm.dev/rig=true:NoSchedule")
	n, p, err := rignode.NewNode(rignode.NodeConfig{
		Provider: rignode.Config{
			NodeName: nodeName, NodeIP: "127.0.0.1", RootDir: root,
			Images:    rignode.ImageMap{"example.com/helper": self},
			APIServer: restCfg.Host, APIServerCA: restCfg.CAData,
			RestartBackoff: 100 * time.Millisecond,
			PullImages:     true, ImagePullBackoff: 300 * time.Millisecond, ImageGCKeepUnused: 1,
		},
		Client: cs, Port: int32(nodePort), ListenAddress: "127.0.0.1", AnonymousAuth: true,
		Labels: map[string]string{"farm.clawfarm.dev/rig-host": "true"}, Taints: taints,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "new node:", err)
		return 1
	}
	provider = p
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = n.Run(ctx) }()
	if err := n.WaitReady(ctx, time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "node not ready:", err)
		cancel()
		return 1
	}
	code := m.Run()
	cancel()
	<-n.Done()
	return code
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// helper is what pods run. Modes:
//
//	exit CODE [MESSAGE]   print two lines, write MESSAGE to $TERM_LOG, exit CODE
//	env NAME...           write {NAME: value} of the named variables to $TERM_LOG
//	cat FILE              write FILE's content to $TERM_LOG
//	stubborn MARKER       note each SIGTERM in MARKER, ignore it, run until killed
//	hold FILE SECS [stubborn] lock FILE for SECS (ignoring SIGTERM), "alone"; "overlap" if it is locked
//	sleep                 run until SIGTERM, then exit 143
//	lines N DELAY         print N numbered lines, DELAY apart, then exit 0
//	count FILE            exit 1 the first time (FILE counts runs), 0 after
//	attempt               act as the loop: a state file, the termination message
//	whoami                get the own pod with the pod's KUBECONFIG, write its node name
//	echo PORT             on 127.0.0.1:PORT, send back each connection's bytes upper-cased
func helper(args []string) int {
	term := os.Getenv("TERM_LOG")
	write := func(s string) {
		if err := os.WriteFile(term, []byte(s), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "write termination message:", err)
		}
	}
	switch args[0] {
	case "exit":
		code, _ := strconv.Atoi(args[1])
		fmt.Println("first line")
		fmt.Fprintln(os.Stderr, "second line")
		if len(args) > 2 {
			write(args[2])
		}
		return code
	case "env":
		out := map[string]string{}
		for _, n := range args[1:] {
			out[n] = os.Getenv(n)
		}
		b, _ := json.Marshal(out)
		write(string(b))
		return 0
	case "cat":
		b, err := os.ReadFile(args[1])
		if err != nil {
			write("error: " + err.Error())
			return 1
		}
		write(string(b))
		return 0
	case "stubborn":
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		for range ch {
			f, _ := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			_, _ = f.WriteString("SIGTERM\n")
			_ = f.Close()
		}
		return 0
	case "hold":
		// hold FILE SECONDS [stubborn]: take an exclusive lock on FILE — the
		// ground truth of "one process on this rig" — or report "overlap".
		f, err := os.OpenFile(args[1], os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			write("error: " + err.Error())
			return 1
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			write("overlap: another process holds " + args[1])
			return 1
		}
		if len(args) > 3 && args[3] == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("holding")
		secs, _ := strconv.Atoi(args[2])
		time.Sleep(time.Duration(secs) * time.Second)
		write("alone")
		return 0
	case "sleep":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		return 143
	case "lines":
		n, _ := strconv.Atoi(args[1])
		d, _ := time.ParseDuration(args[2])
		for i := 1; i <= n; i++ {
			fmt.Printf("line %d\n", i)
			time.Sleep(d)
		}
		return 0
	case "count":
		b, _ := os.ReadFile(args[1])
		runs := len(b)
		_ = os.WriteFile(args[1], append(b, 'x'), 0o644)
		if runs == 0 {
			return 1
		}
		return 0
	case "attempt":
		state := os.Getenv("CLAWFARM_STATE_DIR")
		if err := os.WriteFile(state+"/memory.md", []byte("key="+os.Getenv("CLAWFARM_MODEL_API_KEY")), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(os.Getenv("CLAWFARM_TERMINATION_LOG"), []byte(`{"sentinel":"DONE"}`), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "whoami":
		cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
		if err != nil {
			write("kubeconfig: " + err.Error())
			return 1
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			write(err.Error())
			return 1
		}
		pod, err := c.CoreV1().Pods(os.Getenv("POD_NAMESPACE")).Get(context.Background(), os.Getenv("POD_NAME"), metav1.GetOptions{})
		if err != nil {
			write("get pod: " + err.Error())
			return 1
		}
		write("node=" + pod.Spec.NodeName + " host=" + os.Getenv("KUBERNETES_SERVICE_HOST"))
		return 0
	case "echo":
		l, err := net.Listen("tcp", "127.0.0.1:"+args[1])
		if err != nil {
			write("listen: " + err.Error())
			return 1
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client half-closes
				_, _ = c.Write(bytes.ToUpper(b))
			}()
		}
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", args)
	return 2
}

// newPod is a pod bound to the test node that runs the helper with args.
func newPod(t *testing.T, args ...string) *corev1.Pod {
	t.Helper()
	ns := namespace(t)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Key: "farm.clawfarm.dev/rig", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "main", Image: helperImage, Args: args,
				Env: []corev1.EnvVar{
					{Name: "RIGNODE_TEST_HELPER", Value: "1"},
					{Name: "TERM_LOG", Value: corev1.TerminationMessagePathDefault},
				},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
}

var nsCounter atomic.Int64

func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func create(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := cs.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitPod polls the pod until ok holds or the timeout passes.
func waitPod(t *testing.T, pod *corev1.Pod, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last != nil {
		b, _ := json.MarshalIndent(last.Status, "", "  ")
		t.Fatalf("pod %s/%s: %s did not happen in %s; last status:\n%s", pod.Namespace, pod.Name, what, timeout, b)
	}
	t.Fatalf("pod %s/%s: %s did not happen in %s (pod not found)", pod.Namespace, pod.Name, what, timeout)
	return nil
}

func phaseIs(phases ...corev1.PodPhase) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, ph := range phases {
			if p.Status.Phase == ph {
				return true
			}
		}
		return false
	}
}

// waitLog waits until the pod's log holds text: the helper says it is ready
// (a signal handler installed, a lock taken) before a test acts on it.
func waitLog(t *testing.T, pod *corev1.Pod, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		raw, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Do(context.Background()).Raw()
		if err == nil && strings.Contains(string(raw), text) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s never logged %q", pod.Namespace, pod.Name, text)
}

func terminated(t *testing.T, p *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("container has not terminated: %+v", p.Status.ContainerStatuses)
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

// grantPodRead lets the service account sa get pods in ns.
func grantPodRead(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
