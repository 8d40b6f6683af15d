package rignode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// container is one container of a pod: how to start its process, and its state.
// All fields after spec are guarded by the pod's mutex.
type container struct {
	spec     corev1.Container
	init     bool
	argv     []string
	env      []string
	workDir  string
	dir      string // rignode's files for this container: logs, termination-log, pid
	termFile string
	imageID  string
	// paths maps the container's mount paths to host paths; prepare adds the image's.
	paths      PathMap
	kubeconfig string
	// rootDigest is the pulled image root the container runs from (none for
	// an image-map binary).
	rootDigest string

	runs    int // how many times the process started
	state   corev1.ContainerState
	last    corev1.ContainerState
	final   bool      // will not run again
	proc    *shimmed  // the running process; nil when none runs
	pending *shimExit // how an adopted run ended while no rignode watched it
	id      string
}

func (r *podRun) newContainer(spec *corev1.Container, init bool, vs *volumeSet, kubeconfig string) (*container, error) {
	p := r.p
	what := fmt.Sprintf("container %q", spec.Name)
	c := &container{spec: *spec.DeepCopy(), init: init, dir: filepath.Join(r.dir, "containers", spec.Name), kubeconfig: kubeconfig}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	for _, m := range spec.VolumeMounts {
		host, ok := vs.paths[m.Name]
		if !ok {
			return nil, fmt.Errorf("%s mounts volume %q, which the pod does not declare", what, m.Name)
		}
		if m.SubPath != "" {
			host = filepath.Join(host, m.SubPath)
			if err := os.MkdirAll(host, 0o755); err != nil {
				return nil, fmt.Errorf("%s: subPath %s: %w", what, m.SubPath, err)
			}
		}
		c.paths.Add(m.MountPath, host)
	}
	termPath := spec.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	c.termFile = filepath.Join(c.dir, "termination-log")
	c.paths.Add(termPath, c.termFile)

	// An image the image map names is a host binary (a development
	// override): ready now. Any other is pulled before the first start.
	switch bin, err := p.cfg.Images.Resolve(spec.Image); {
	case err == nil:
		if err := c.prepare(r, imageSource{bin: bin}); err != nil {
			return nil, err
		}
	case p.images == nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	reason := "ContainerCreating"
	if !init && len(r.pod.Spec.InitContainers) > 0 {
		reason = "PodInitializing"
	}
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	return c, nil
}

// imageSource is what a container's image stands for on this host: a host
// binary or directory the image map names, or a pulled image's root.
type imageSource struct {
	bin  string
	root *imageRoot
}

// prepare works out the container's process from its image and its spec:
// argv, environment and working directory, with every path the container
// expects rewritten to the host path that stands for it.
func (c *container) prepare(r *podRun, src imageSource) error {
	p, spec := r.p, &c.spec
	what := fmt.Sprintf("container %q", spec.Name)
	paths := c.paths.Clone()
	env := map[string]string{}
	for _, kv := range p.cfg.BaseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}

	var args []string
	switch {
	case src.root != nil:
		// The image's own directories stand for themselves inside its root;
		// mounts (longer paths) still win. /tmp and the kernel's directories
		// stay the host's: the root is shared by every pod of the image.
		entries, err := os.ReadDir(src.root.Dir)
		if err != nil {
			return fmt.Errorf("%s: image root: %w", what, err)
		}
		for _, e := range entries {
			switch e.Name() {
			case "tmp", "dev", "proc", "sys", "run":
				continue
			}
			paths.Add("/"+e.Name(), filepath.Join(src.root.Dir, e.Name()))
		}
		for _, kv := range src.root.Config.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = paths.Value(v)
			}
		}
		// Kubernetes: command replaces the entrypoint and drops the image's
		// cmd; args alone replace the cmd.
		var argv []string
		switch {
		case len(spec.Command) > 0:
			argv = append(append(argv, spec.Command...), spec.Args...)
		case len(spec.Args) > 0:
			argv = append(append(argv, src.root.Config.Entrypoint...), spec.Args...)
		default:
			argv = append(append(argv, src.root.Config.Entrypoint...), src.root.Config.Cmd...)
		}
		if len(argv) == 0 {
			return fmt.Errorf("%s: image %s has no entrypoint or cmd, and the container no command", what, spec.Image)
		}
		c.argv = []string{lookPath(paths.Path(argv[0]), env["PATH"])}
		args = argv[1:]
		c.imageID = src.root.ImageID
		c.rootDigest = src.root.Digest
	default:
		bin := src.bin
		c.imageID = "rignode://" + bin
		// argv: the mapped binary is the image's entrypoint; a mapped
		// directory is the image's root, in which command[0] is found.
		st, err := os.Stat(bin)
		if err != nil {
			return fmt.Errorf("%s: image %s maps to %s: %w", what, spec.Image, bin, err)
		}
		switch {
		case st.IsDir() && len(spec.Command) == 0:
			return fmt.Errorf("%s: image %s maps to the directory %s, so the container needs a command naming the program in it", what, spec.Image, bin)
		case st.IsDir():
			c.argv = []string{filepath.Join(bin, filepath.Clean("/"+spec.Command[0]))}
			args = append(append(args, spec.Command[1:]...), spec.Args...)
		case len(spec.Command) > 0:
			c.argv = []string{bin}
			args = append(append(args, spec.Command[1:]...), spec.Args...)
		default:
			c.argv = []string{bin}
			args = spec.Args
		}
	}

	// A writable home and temporary directory of the pod's own, never the
	// image's shared root.
	env["HOME"] = r.dir
	env["HOSTNAME"] = r.pod.Name
	env["TMPDIR"] = filepath.Join(r.dir, "tmp")
	if err := os.MkdirAll(env["TMPDIR"], 0o777); err != nil {
		return err
	}
	for _, e := range spec.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && v == "" {
			var err error
			if v, err = FieldValue(r.pod, e.ValueFrom.FieldRef.FieldPath); err != nil {
				return fmt.Errorf("%s: env %s: %w", what, e.Name, err)
			}
		}
		// Only the container's own values are rewritten: rignode's (HOME,
		// TMPDIR, PATH, KUBECONFIG) are host paths already.
		env[e.Name] = expand(paths.Value(v), env)
	}
	if p.cfg.APIServer != "" {
		// The cluster's service IP is not reachable from a host process: point
		// in-cluster clients at the API server itself.
		svc, err := serviceEnv(p.cfg.APIServer)
		if err != nil {
			return err
		}
		for k := range env {
			if strings.HasPrefix(k, "KUBERNETES_PORT_") {
				delete(env, k)
			}
		}
		for k, v := range svc {
			env[k] = v
		}
		if _, set := env["KUBECONFIG"]; !set && c.kubeconfig != "" {
			env["KUBECONFIG"] = c.kubeconfig
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	c.env = c.env[:0]
	for _, k := range keys {
		c.env = append(c.env, k+"="+env[k])
	}
	for _, a := range args {
		c.argv = append(c.argv, expand(paths.Value(a), env))
	}
	// The pod's directory, not the image's working directory: the image's
	// root is shared by every pod that runs it.
	c.workDir = r.dir
	if spec.WorkingDir != "" {
		c.workDir = paths.Path(spec.WorkingDir)
	}
	return nil
}

// lookPath finds a command without a slash in PATH (already rewritten to
// host paths), as a container runtime resolves it in the image; otherwise the
// name is left for the shim to find.
func lookPath(cmd, path string) string {
	if strings.Contains(cmd, "/") {
		return cmd
	}
	for _, d := range filepath.SplitList(path) {
		f := filepath.Join(d, cmd)
		if st, err := os.Stat(f); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return f
		}
	}
	return cmd
}

// expand replaces $(VAR) with VAR's value as Kubernetes does; $$ escapes; unknown references stay.
func expand(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if j := strings.IndexByte(s[i+2:], ')'); j >= 0 {
				name := s[i+2 : i+2+j]
				if v, ok := env[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+j])
				}
				i += 2 + j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (c *container) logPath(run int) string {
	return filepath.Join(c.dir, strconv.Itoa(run)+".log")
}

// file is one of the shim's files for the n-th run (see shim.go).
func (c *container) file(run int, kind string) string {
	return filepath.Join(c.dir, strconv.Itoa(run)+"."+kind)
}

func (c *container) started() bool { return c.runs > 0 }

// shimStartTimeout bounds how long rignode waits for a shim to report its
// process started (or could not).
const shimStartTimeout = 10 * time.Second

// start runs the next run of the container under a shim (shim.go) and waits
// until the process runs. Called with the pod's mutex held.
func (c *container) start(cfg *Config) error {
	if err := os.WriteFile(c.termFile, nil, 0o666); err != nil {
		return fmt.Errorf("termination message file: %w", err)
	}
	if c.state.Terminated != nil {
		c.last = c.state
	}
	c.runs++
	n := c.runs
	spec := shimSpec{
		Argv: c.argv, Env: c.env, Dir: c.workDir,
		Log: c.logPath(n), LogMaxSize: cfg.LogMaxSize, LogMaxFiles: cfg.LogMaxFiles,
		TermFile: c.termFile, State: c.file(n, "state"), Exit: c.file(n, "exit"),
	}
	specFile := c.file(n, "spec")
	if err := writeJSON(specFile, spec); err != nil {
		return fmt.Errorf("shim spec: %w", err)
	}
	shimLog, err := os.Create(c.file(n, "shim.log"))
	if err != nil {
		return fmt.Errorf("shim log: %w", err)
	}
	defer func() { _ = shimLog.Close() }()
	cmd := exec.Command(cfg.ShimCommand[0], append(cfg.ShimCommand[1:], specFile)...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = shimLog, shimLog, c.dir
	// A session of its own: no signal to rignode's group or terminal reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the shim %s: %w", cfg.ShimCommand[0], err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	sh := &shimmed{stateFile: spec.State, exitFile: spec.Exit, reaped: reaped}
	deadline := time.Now().Add(shimStartTimeout)
	for {
		gone := false
		select {
		case <-reaped:
			gone = true
		default:
		}
		if err := readJSON(spec.State, &sh.state); err == nil {
			break
		}
		if e, ok := sh.exit(); ok {
			if e.StartError != "" {
				return errors.New(e.StartError)
			}
			sh.state.StartedAt = e.StartedAt // ran and ended, its state file unwritten
			break
		}
		if gone {
			b, _ := os.ReadFile(c.file(n, "shim.log"))
			return fmt.Errorf("the shim ended before the process started: %s", strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("the shim did not start the process within %s", shimStartTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.running(sh)
	return nil
}

// running records sh as the container's running process.
func (c *container) running(sh *shimmed) {
	c.proc = sh
	c.id = fmt.Sprintf("rignode://%d", sh.state.PID)
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(sh.state.StartedAt)}}
}

// startFailed records a process that could not start (exit 128, StartError, as the kubelet reports it).
func (c *container) startFailed(err error) {
	now := metav1.Now()
	if c.state.Terminated != nil {
		c.last = c.state
	}
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now,
	}}
}

// exited records how the process ended. Called with the pod's mutex held.
func (c *container) exited(res shimExit) {
	c.state = corev1.ContainerState{Terminated: c.terminated(res)}
	c.proc = nil
}

func (c *container) terminated(res shimExit) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode: res.Code, Signal: res.Signal, Reason: "Completed", Message: res.Message,
		StartedAt: metav1.NewTime(res.StartedAt), FinishedAt: metav1.NewTime(res.FinishedAt), ContainerID: c.id,
	}
	switch {
	case res.StartError != "":
		t.Reason, t.Message = "StartError", res.StartError
	case res.lost != "":
		t.Reason, t.Message = "ContainerStatusUnknown", res.lost
	case res.Code != 0:
		t.Reason = "Error"
		if t.Message == "" && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			t.Message = tailText(c.logPath(c.runs), fallbackLogLines, fallbackLogBytes)
		}
	}
	return t
}

func (c *container) waiting(reason, message string) {
	if c.state.Terminated != nil {
		c.last = c.state
	}
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}

func (c *container) exitCode() int32 {
	if c.state.Terminated != nil {
		return c.state.Terminated.ExitCode
	}
	if c.last.Terminated != nil {
		return c.last.Terminated.ExitCode
	}
	return 0
}

func (c *container) status() corev1.ContainerStatus {
	restarts := int32(0)
	if c.runs > 1 {
		restarts = int32(c.runs - 1)
	}
	return corev1.ContainerStatus{
		Name:                 c.spec.Name,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.last.DeepCopy(),
		Ready:                c.state.Running != nil && !c.init,
		Started:              ptrBool(c.state.Running != nil),
		RestartCount:         restarts,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		ContainerID:          c.id,
	}
}

func ptrBool(b bool) *bool { return &b }

// killGroup sends SIGTERM (or SIGKILL) to the process group pid leads.
func killGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}
