package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The test binary runs rignode in-process, so it is also the shim rignode
// starts; it also plays rignode and a pod's program (restart_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(rignode.RunShim(os.Args[2:]))
	}
	if code, ok := testMain(); ok {
		os.Exit(code)
	}
	code := m.Run()
	if api.env != nil {
		_ = api.env.Stop()
	}
	os.Exit(code)
}

// api is the one API server the package's tests share, started by the first
// test that needs it; each test's rignode registers a node of its own.
var api struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

// apiServer starts the shared API server on first use and returns its config.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	testenv.Needs(t, testenv.Assets)
	api.once.Do(func() {
		api.env = &envtest.Environment{}
		if api.cfg, api.err = api.env.Start(); api.err != nil {
			api.env = nil
		}
	})
	if api.err != nil {
		t.Fatal(api.err)
	}
	return api.cfg
}

func TestBadFlagsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--pull-images=false"},                                         // no way to run an image
		{"--image-gc-keep-unused=-1"},                                   // a negative count
		{"--image-map", "noequals"},                                     // not image=path
		{"--image-map", "x=/does/not/exist"},                            // missing binary
		{"--image-map", "x=/bin/sh", "--register-with-taints", "k=v"},   // taint without effect
		{"--image-map", "x=/bin/sh", "--memory", "lots"},                // not a quantity
		{"--image-map", "x=/bin/sh", "--kubeconfig", "/does/not/exist"}, // no kubeconfig
	} {
		if code := run(context.Background(), args); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

// The command as the dev cluster starts it: a kubeconfig file, an image map
// with a directory entry, a pod running /bin/sh.
func TestRunsAPodFromTheCommandLine(t *testing.T) {
	t.Parallel()
	cfg := apiServer(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{
			"--kubeconfig", kubeconfig, "--node-name", "cli-node", "--node-ip", "127.0.0.1",
			"--port", fmt.Sprint(port), "--address", "127.0.0.1", "--anonymous-auth",
			"--image-map", "busybox=/bin", "--root-dir", filepath.Join(dir, "root"),
		})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("rignode exited %d after cancel", code)
		}
	}()

	cs := kubernetes.NewForConfigOrDie(cfg)
	c := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sh"},
		Spec: corev1.PodSpec{NodeName: "cli-node", RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "sh", Image: "busybox:1.36", Command: []string{"sh", "-c", `echo hello; printf "$(NODE) bye" > /dev/termination-log; exit 3`},
			Env: []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(c, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods("default").Get(c, "sh", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodFailed {
			term := p.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != 3 || term.Message != "cli-node bye" {
				t.Fatalf("terminated = %+v, want exit 3 and the message", term)
			}
			logs, err := cs.CoreV1().Pods("default").GetLogs("sh", &corev1.PodLogOptions{}).DoRaw(c)
			if err != nil || string(logs) != "hello\n" {
				t.Fatalf("logs %q, %v", logs, err)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the pod did not fail with exit 3 in time")
}

func TestHostMemoryIsAQuantity(t *testing.T) {
	t.Parallel()
	q, err := resource.ParseQuantity(hostMemory())
	if err != nil || q.Value() <= 0 {
		t.Fatalf("hostMemory() = %q: %v", hostMemory(), err)
	}
}
