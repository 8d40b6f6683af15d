package trace

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

var (
	env *testenv.Env
	cs  *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// fixture is a trace server over a fresh store, with the API server as its authority.
type fixture struct {
	t     *testing.T
	srv   *Server
	http  *httptest.Server
	store *FSStore
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	store, err := NewFSStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Store: store, Runs: env.Client, Auth: NewKubeAuthority(cs, ""), Logf: t.Logf}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &fixture{t: t, srv: srv, http: hs, store: store}
}

func (f *fixture) do(method, path, token string, body []byte, header ...string) (int, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.http.URL+path, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func makeRun(t *testing.T, ns, name string) *farmv1.AgentRun {
	t.Helper()
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: farmv1.AgentRunSpec{
			RigRef:  &farmv1.RigReference{Name: "rig-1"},
			Trigger: "Open Settings.",
			Model:   farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/settings", BaseURL: "http://127.0.0.1:1/v1"},
		},
	}
	if err := env.Client.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func makeSA(t *testing.T, ns, name string) {
	t.Helper()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// attemptPod creates the pod the operator would, and a token projected for
// it with the given audience, as the kubelet would.
func attemptPod(t *testing.T, run *farmv1.AgentRun, attempt int, audience string) string {
	t.Helper()
	name := fmt.Sprintf("%s-a%d", run.Name, attempt)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: name,
			Labels: map[string]string{farmv1.LabelRun: run.Name, farmv1.LabelAttempt: fmt.Sprint(attempt), farmv1.LabelKind: "attempt"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: run.Name,
				UID: run.UID, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{ServiceAccountName: "loop", Containers: []corev1.Container{{Name: "loop", Image: "loop"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return podToken(t, pod, audience)
}

func podToken(t *testing.T, pod *corev1.Pod, audience string) string {
	t.Helper()
	spec := authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName,
		&authnv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// viewer is a service account allowed to get agentruns in the namespaces
// given, and its token for the API server.
func viewer(t *testing.T, home string, readable ...string) string {
	t.Helper()
	makeSA(t, home, "viewer")
	for _, ns := range readable {
		ctx := context.Background()
		_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{farmv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list"}}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "run-viewer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: home}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(home).CreateToken(context.Background(), "viewer",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func screenJPEG(t *testing.T, shade uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 90, 195))
	for y := 0; y < 195; y++ {
		for x := 0; x < 90; x++ {
			img.Set(x, y, color.RGBA{shade, 120, 200 - shade, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// settingsRun makes a namespace with the run "settings" and its first
// attempt's pod, and returns the pod's trace token and the attempt's API path.
func settingsRun(t *testing.T) (ns, token, base string) {
	t.Helper()
	ns = env.Namespace(t)
	makeSA(t, ns, "loop")
	run := makeRun(t, ns, "settings")
	return ns, attemptPod(t, run, 1, DefaultAudience), "/api/v1/runs/" + ns + "/settings/attempts/1"
}

// session is a short recorded stream: a peek, then a tap on what it showed.
const session = `{"ts":"2026-12-01T10:00:00Z","stream":"lifecycle","type":"session_start","run":"%[1]s","attempt":1,"provider":"openai-compatible","model":"sim/settings","tools":["peek","tap"]}
{"ts":"2026-12-01T10:00:00Z","stream":"lifecycle","type":"system_prompt","text":"You drive a real phone.\n\n### rig/phone-apps/apps.md\nSettings is <b>grey</b>.","sha256":"5eed"}
{"ts":"2026-12-01T10:00:01Z","stream":"tool","type":"tool_start","turn":1,"tool":"note","callId":"c1","args":{"summary":"looking at the home screen"}}
{"ts":"2026-12-01T10:00:01Z","stream":"tool","type":"tool_start","turn":1,"tool":"peek","callId":"c2","args":{}}
{"ts":"2026-12-01T10:00:02Z","stream":"tool","type":"tool_result","turn":1,"tool":"peek","callId":"c2","text":"Settings [0.40,0.60,0.58,0.66]","images":1}
{"ts":"2026-12-01T10:00:03Z","stream":"tool","type":"tool_start","turn":2,"tool":"note","callId":"c3","args":{"summary":"opening Settings"}}
{"ts":"2026-12-01T10:00:03Z","stream":"tool","type":"tool_start","turn":2,"tool":"tap","callId":"c4","args":{"bbox":[0.4,0.6,0.58,0.66]}}
{"ts":"2026-12-01T10:00:04Z","stream":"tool","type":"tool_result","turn":2,"tool":"tap","callId":"c4","text":"Tapped at bbox [0.4, 0.6, 0.58, 0.66]"}
`

const doneLine = `{"ts":"2026-12-01T10:00:05Z","stream":"lifecycle","type":"done","sentinel":"DONE","exitReason":"done","retryable":false,"turns":2,"recap":"Settings is open."}
`

func TestLoopWritesOnlyItsOwnAttempt(t *testing.T) {
	f := newFixture(t)
	ns := env.Namespace(t)
	makeSA(t, ns, "loop")
	run, other := makeRun(t, ns, "settings"), makeRun(t, ns, "other")
	tok := attemptPod(t, run, 1, DefaultAudience)
	base := "/api/v1/runs/" + ns + "/settings/attempts/1"

	if code, body := f.do("PUT", base+"/events/1-0", tok, []byte(fmt.Sprintf(session, ns+"/settings"))); code != http.StatusNoContent {
		t.Fatalf("own chunk: %d %s", code, body)
	}
	if code, body := f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, screenJPEG(t, 10)); code != http.StatusNoContent {
		t.Fatalf("own screen: %d %s", code, body)
	}
	refused := []struct {
		what, path string
		body       []byte
		want       int
	}{
		{"another run's trace", "/api/v1/runs/" + ns + "/" + other.Name + "/attempts/1/events/1-1", []byte("{}\n"), http.StatusForbidden},
		{"another attempt", "/api/v1/runs/" + ns + "/settings/attempts/2/events/1-1", []byte("{}\n"), http.StatusForbidden},
		{"half a line", base + "/events/1-1", []byte(`{"type":`), http.StatusBadRequest},
		{"a chunk name that is not <start>-<seq>", base + "/events/..%2f..%2fx", []byte("{}\n"), http.StatusBadRequest},
		{"a screen that is not an image", base + "/screens/screen-t0001-2.jpg", []byte("#!/bin/sh\nrm -rf /\n"), http.StatusBadRequest},
		{"a file that is not a screen", base + "/screens/evil.sh", screenJPEG(t, 1), http.StatusBadRequest},
	}
	for _, r := range refused {
		if code, body := f.do("PUT", r.path, tok, r.body); code != r.want {
			t.Errorf("%s: %d %s, want %d", r.what, code, body, r.want)
		}
	}

	// A token for the API server, or a pod's token for another audience, writes nothing.
	apiTok := attemptPod(t, run, 2, "")
	if code, body := f.do("PUT", "/api/v1/runs/"+ns+"/settings/attempts/2/events/1-0", apiTok, []byte("{}\n")); code != http.StatusUnauthorized {
		t.Errorf("a token without the trace audience: %d %s, want 401", code, body)
	}
	if code, _ := f.do("PUT", base+"/events/1-2", "", []byte("{}\n")); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	// A viewer's token is no writer's.
	vt := viewer(t, ns, ns)
	if code, body := f.do("PUT", base+"/events/1-3", vt, []byte("{}\n")); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("a viewer writing: %d %s, want 401 or 403", code, body)
	}

	objs, err := f.store.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	want := []string{
		"runs/" + ns + "/settings/" + string(run.UID) + "/a1/events/00000000000000000001-000000000.jsonl",
		"runs/" + ns + "/settings/" + string(run.UID) + "/a1/screens/screen-t0001-1.jpg",
	}
	if strings.Join(keys, "\n") != strings.Join(want, "\n") {
		t.Errorf("stored:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadersNeedGetAgentRuns(t *testing.T) {
	f := newFixture(t)
	mine, theirs := env.Namespace(t), env.Namespace(t)
	makeSA(t, mine, "loop")
	makeSA(t, theirs, "loop")
	run := makeRun(t, mine, "settings")
	makeRun(t, theirs, "secret")
	tok := attemptPod(t, run, 1, DefaultAudience)
	base := "/api/v1/runs/" + mine + "/settings/attempts/1"
	f.do("PUT", base+"/events/5-0", tok, []byte(fmt.Sprintf(session, mine+"/settings")))
	f.do("PUT", base+"/events/5-1", tok, []byte(doneLine))
	shot := screenJPEG(t, 40)
	f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, shot)

	vt := viewer(t, mine, mine)
	code, body := f.do("GET", "/api/v1/runs", vt, nil)
	if code != http.StatusOK || !strings.Contains(body, `"name": "settings"`) || strings.Contains(body, "secret") {
		t.Errorf("runs list: %d\n%s\nwant settings and not secret", code, body)
	}
	if code, body := f.do("GET", "/api/v1/runs/"+theirs+"/secret", vt, nil); code != http.StatusForbidden {
		t.Errorf("another namespace's run: %d %s, want 403", code, body)
	}
	if code, _ := f.do("GET", "/api/v1/runs?namespace="+theirs, vt, nil); code != http.StatusForbidden {
		t.Errorf("another namespace's list: %d, want 403", code)
	}
	if code, _ := f.do("GET", base+"/events", "", nil); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := f.do("GET", base+"/events", "not-a-token", nil); code != http.StatusUnauthorized {
		t.Errorf("a bad token: %d, want 401", code)
	}
	code, body = f.do("GET", base+"/events", vt, nil)
	if want := fmt.Sprintf(session, mine+"/settings") + doneLine; code != http.StatusOK || body != want {
		t.Errorf("events: %d\n%s\nwant the chunks in order:\n%s", code, body, want)
	}
	if code, body := f.do("GET", base+"/screens/screen-t0001-1.jpg", vt, nil); code != http.StatusOK || body != string(shot) {
		t.Errorf("screen: %d, %d bytes, want the %d uploaded", code, len(body), len(shot))
	}
	if code, body := f.do("GET", "/api/v1/runs/"+mine+"/settings", vt, nil); code != http.StatusOK || !strings.Contains(body, `"attempts": [
    1
  ]`) {
		t.Errorf("run: %d %s", code, body)
	}
}

func TestRunPageDrawsTheTapWhereTheEventSays(t *testing.T) {
	f := newFixture(t)
	ns, tok, base := settingsRun(t)
	f.do("PUT", base+"/events/5-0", tok, []byte(fmt.Sprintf(session, ns+"/settings")+doneLine))
	f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, screenJPEG(t, 40))
	vt := viewer(t, ns, ns)

	code, page := f.do("GET", "/runs/"+ns+"/settings", vt, nil)
	if code != http.StatusOK {
		t.Fatalf("run page: %d %s", code, page)
	}
	for _, want := range []string{
		`id="a1-t2"`, // the tap's turn
		`src="/api/v1/runs/` + ns + `/settings/attempts/1/screens/screen-t0001-1.jpg"`, // drawn on the screen the peek returned
		`data-bbox="0.4,0.6,0.58,0.66" style="left:40.00%;top:60.00%;width:18.00%;height:6.00%"`,
		"opening Settings", "Tapped at bbox [0.4, 0.6, 0.58, 0.66]", "Settings is open.", ">DONE<",
		// The system prompt the model saw, escaped, with its hash.
		"system prompt · sha256 5eed", "### rig/phone-apps/apps.md\nSettings is &lt;b&gt;grey&lt;/b&gt;.",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
	code, export := f.do("GET", "/runs/"+ns+"/settings/export", vt, nil)
	if code != http.StatusOK || !strings.Contains(export, `src="data:image/jpeg;base64,`) || strings.Contains(export, "<script") ||
		strings.Contains(export, "/static/app.css") {
		t.Errorf("export: %d; want the screens inlined, the style inlined and no script", code)
	}
	code, list := f.do("GET", "/?namespace="+ns, vt, nil)
	if code != http.StatusOK || !strings.Contains(list, `href="/runs/`+ns+`/settings"`) {
		t.Errorf("runs page: %d\n%s", code, list)
	}
}

func TestFollowSendsNewEventsUntilDone(t *testing.T) {
	f := newFixture(t)
	ns, tok, base := settingsRun(t)
	f.do("PUT", base+"/events/5-0", tok, []byte(fmt.Sprintf(session, ns+"/settings")))
	vt := viewer(t, ns, ns)

	req, _ := http.NewRequest("GET", f.http.URL+base+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+vt)
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, MaxLine)
	data := 0
	for sc.Scan() && data < 8 {
		if strings.HasPrefix(sc.Text(), "data: ") {
			data++
		}
	}
	if data != 8 {
		t.Fatalf("got %d events of the first chunk, want 8", data)
	}
	f.do("PUT", base+"/events/5-1", tok, []byte(doneLine))
	var rest []string
	for sc.Scan() {
		if sc.Text() != "" {
			rest = append(rest, sc.Text())
		}
	}
	if len(rest) != 3 || !strings.Contains(rest[0], `"type":"done"`) || rest[1] != "event: end" {
		t.Errorf("after the done chunk the stream sent %q; want the done event, then end", rest)
	}
}

func TestDeletedRunsTraceGoesAndRetentionBoundsTheRest(t *testing.T) {
	f := newFixture(t)
	ns := env.Namespace(t)
	makeSA(t, ns, "loop")
	gone, kept := makeRun(t, ns, "gone"), makeRun(t, ns, "kept")
	for _, r := range []*farmv1.AgentRun{gone, kept} {
		tok := attemptPod(t, r, 1, DefaultAudience)
		if code, body := f.do("PUT", "/api/v1/runs/"+ns+"/"+r.Name+"/attempts/1/events/1-0", tok, []byte("{}\n")); code != http.StatusNoContent {
			t.Fatalf("upload: %d %s", code, body)
		}
	}
	if err := env.Client.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	removed, err := f.srv.Sweep(context.Background(), 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	left, _ := f.store.List(context.Background(), "runs/"+ns+"/")
	if removed != 1 || len(left) != 1 || !strings.Contains(left[0].Key, "/kept/") {
		t.Errorf("after deleting a run the sweep removed %d and left %v; want the deleted run's trace gone, the other kept", removed, left)
	}
	if removed, _ = f.srv.Sweep(context.Background(), time.Hour, time.Now().Add(59*time.Minute)); removed != 0 {
		t.Errorf("a trace inside retention was removed")
	}
	if removed, _ = f.srv.Sweep(context.Background(), time.Hour, time.Now().Add(61*time.Minute)); removed != 1 {
		t.Errorf("a trace past retention was kept")
	}
}

// A loop pod's token for the API server reads its own attempt's trace and
// nothing else: not the list of runs, not another run of its namespace,
// not another attempt of its run — although the loop's RBAC lets it get
// every run of the namespace (to read its own approvals and steers).
func TestLoopTokenReadsOnlyItsOwnAttempt(t *testing.T) {
	f := newFixture(t)
	ns := env.Namespace(t)
	makeSA(t, ns, "loop")
	// The loop's role: get agentruns in its namespace.
	ctx := context.Background()
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "loop"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{farmv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "loop"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "loop"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "loop", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run, other := makeRun(t, ns, "settings"), makeRun(t, ns, "other")
	writeTok := attemptPod(t, run, 1, DefaultAudience)
	otherTok := attemptPod(t, other, 1, DefaultAudience)
	f.do("PUT", "/api/v1/runs/"+ns+"/settings/attempts/1/events/1-0", writeTok, []byte(fmt.Sprintf(session, ns+"/settings")))
	f.do("PUT", "/api/v1/runs/"+ns+"/other/attempts/1/events/1-0", otherTok, []byte(fmt.Sprintf(session, ns+"/other")))
	var pod corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "settings-a1"}, &pod); err != nil {
		t.Fatal(err)
	}
	apiTok := podToken(t, &pod, "") // the token the loop patches its progress with

	code, body := f.do("GET", "/api/v1/runs/"+ns+"/settings/attempts/1/events", apiTok, nil)
	if code != http.StatusOK || !strings.Contains(body, ns+"/settings") {
		t.Errorf("its own attempt: %d %s", code, body)
	}
	for _, c := range []struct{ what, path string }{
		{"the runs list", "/api/v1/runs"},
		{"its namespace's runs list", "/api/v1/runs?namespace=" + ns},
		{"the runs page", "/?namespace=" + ns},
		{"another run of its namespace", "/api/v1/runs/" + ns + "/other"},
		{"another run's events", "/api/v1/runs/" + ns + "/other/attempts/1/events"},
		{"another attempt of its run", "/api/v1/runs/" + ns + "/settings/attempts/2/events"},
	} {
		code, body := f.do("GET", c.path, apiTok, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "settings-a1's token reads the trace of "+ns+"/settings attempt 1 only") {
			t.Errorf("%s: %d %q, want 403 naming its own attempt", c.what, code, body)
		}
	}
	// A reader who may get runs but not list them reads a run, lists none.
	getOnly := "getter"
	makeSA(t, ns, getOnly)
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: getOnly},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "loop"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: getOnly, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, getOnly,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := f.do("GET", "/api/v1/runs/"+ns+"/other/attempts/1/events", tr.Status.Token, nil); code != http.StatusOK {
		t.Errorf("a reader with get: %d %s, want the events", code, body)
	}
	if code, body := f.do("GET", "/api/v1/runs?namespace="+ns, tr.Status.Token, nil); code != http.StatusForbidden || !strings.Contains(body, "may not list agentruns") {
		t.Errorf("a reader without list lists: %d %s, want 403", code, body)
	}
}

// A chunk or a screen is written once: the same bytes again (a retry) are
// fine, other bytes under its name are refused, so a loop cannot rewrite
// its attempt's trace. An attempt stores at most MaxAttemptBytes.
func TestUploadsAreWrittenOnceAndCapped(t *testing.T) {
	f := newFixture(t)
	_, tok, base := settingsRun(t)
	first := []byte(fmt.Sprintf(session, "x/settings"))
	f.srv.MaxAttemptBytes = int64(len(first)) + 600
	if code, body := f.do("PUT", base+"/events/1-0", tok, first); code != http.StatusNoContent {
		t.Fatalf("first chunk: %d %s", code, body)
	}
	if code, body := f.do("PUT", base+"/events/1-0", tok, first); code != http.StatusNoContent {
		t.Errorf("the same chunk again (a retry): %d %s, want 204", code, body)
	}
	if code, body := f.do("PUT", base+"/events/1-0", tok, []byte(doneLine)); code != http.StatusConflict || !strings.Contains(body, "stored already with other content") {
		t.Errorf("other bytes under a stored chunk: %d %s, want 409", code, body)
	}
	shot := screenJPEG(t, 7)
	if len(shot) > 600 {
		f.srv.MaxAttemptBytes += int64(len(shot))
	}
	if code, body := f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, shot); code != http.StatusNoContent {
		t.Fatalf("a screen: %d %s", code, body)
	}
	if code, body := f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, screenJPEG(t, 99)); code != http.StatusConflict {
		t.Errorf("another image under a stored screen: %d %s, want 409", code, body)
	}
	big := []byte(`{"type":"text_delta","turn":1,"text":"` + strings.Repeat("x", 700) + "\"}\n")
	code, body := f.do("PUT", base+"/events/1-1", tok, big)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "reached the server's cap") {
		t.Errorf("a chunk past the attempt's cap: %d %s, want 413", code, body)
	}
	// A fresh server (a restart) counts what is stored, and still refuses.
	restarted := &Server{Store: f.store, Runs: env.Client, Auth: f.srv.Auth, MaxAttemptBytes: f.srv.MaxAttemptBytes}
	hs := httptest.NewServer(restarted)
	defer hs.Close()
	req, _ := http.NewRequest("PUT", hs.URL+base+"/events/1-2", bytes.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("after a restart, a chunk past the cap: %d, want 413", resp.StatusCode)
	}
	code, body = f.do("GET", base+"/events", viewer(t, strings.Split(base, "/")[4], strings.Split(base, "/")[4]), nil)
	if code != http.StatusOK || body != string(first) {
		t.Errorf("events after the refused writes: %d\n%s\nwant the first chunk only", code, body)
	}
}

// With Pods, a writer is refused the moment its pod is gone, although the
// authority cached its answer for a minute.
func TestWriterIsRefusedOnceItsPodIsGone(t *testing.T) {
	f := newFixture(t)
	f.srv.Auth.(*KubeAuthority).Pods = env.Client
	ns, tok, base := settingsRun(t)
	if code, body := f.do("PUT", base+"/events/1-0", tok, []byte(fmt.Sprintf(session, ns+"/settings"))); code != http.StatusNoContent {
		t.Fatalf("a write while the pod runs: %d %s", code, body)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings-a1"}}
	if err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := f.do("PUT", base+"/events/1-1", tok, []byte(doneLine))
		if code == http.StatusForbidden && strings.Contains(body, "settings-a1 was deleted") {
			break
		}
		if code == http.StatusNoContent || time.Now().After(deadline) {
			t.Fatalf("a write after the pod was deleted: %d %s, want 403", code, body)
		}
		time.Sleep(50 * time.Millisecond) // the pod object is going (envtest has no kubelet to finish it)
	}
}
