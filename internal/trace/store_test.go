package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// storeContract is what the server needs of a Store, checked the same way
// on each implementation.
func storeContract(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	put := func(key, body string) {
		t.Helper()
		if err := s.Put(ctx, key, []byte(body)); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("runs/ns/r/u1/a1/events/2.jsonl", "second\n")
	put("runs/ns/r/u1/a1/events/1.jsonl", "first\n")
	put("runs/ns/r/u1/a2/screens/s.jpg", "jpeg")
	put("runs/ns/other/u2/a1/events/1.jsonl", "x\n")
	put("runs/ns/r/u1/a1/events/1.jsonl", "first, replaced\n")

	objs, err := s.List(ctx, "runs/ns/r/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
		if o.ModTime.IsZero() || time.Since(o.ModTime) > time.Hour || o.Size == 0 {
			t.Errorf("%s: size %d, modified %s", o.Key, o.Size, o.ModTime)
		}
	}
	if want := "runs/ns/r/u1/a1/events/1.jsonl runs/ns/r/u1/a1/events/2.jsonl runs/ns/r/u1/a2/screens/s.jpg"; strings.Join(keys, " ") != want {
		t.Errorf("list: %v, want %s (sorted, nothing of runs/ns/other)", keys, want)
	}
	rc, err := s.Get(ctx, "runs/ns/r/u1/a1/events/1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "first, replaced\n" {
		t.Errorf("get: %q, want the replaced object", b)
	}
	if _, err := s.Get(ctx, "runs/ns/r/u1/a9/none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing object: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"../x", "runs/../x", "/abs", "a//b", "runs/./x"} {
		if err := s.Put(ctx, bad, []byte("x")); err == nil {
			t.Errorf("put %q: accepted", bad)
		}
	}
	if err := s.DeletePrefix(ctx, ""); err == nil {
		t.Error("deleting the whole store is accepted")
	}
	if err := s.DeletePrefix(ctx, "runs/ns/r/"); err != nil {
		t.Fatal(err)
	}
	if objs, _ := s.List(ctx, "runs/ns/r/"); len(objs) != 0 {
		t.Errorf("after delete: %v", objs)
	}
	if objs, _ := s.List(ctx, "runs/ns/"); len(objs) != 1 {
		t.Errorf("the delete went beyond its prefix: %v left", objs)
	}
}

func TestFSStore(t *testing.T) {
	s, err := NewFSStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, s)
}

// versityGateway starts the Versity S3 Gateway (hack/build-versitygw.sh) on
// a directory, with a bucket, and returns its config.
func versityGateway(t *testing.T) S3Config {
	t.Helper()
	bin := testenv.BuiltTool(t, "VERSITYGW", "build-versitygw.sh", "the S3 gateway")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--access", "trace-test", "--secret", "trace-test-secret", "--port", addr, "posix", dir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("versitygw:\n%s", logs.String())
		}
	})
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4("trace-test", "trace-test-secret", "")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.MakeBucket(ctx, "traces", minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw at %s: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return S3Config{Endpoint: addr, Insecure: true, Bucket: "traces", AccessKey: "trace-test", SecretKey: "trace-test-secret"}
}

// The S3 store against a real S3-compatible server: the Versity gateway.
func TestS3Store(t *testing.T) {
	cfg := versityGateway(t)
	cfg.Prefix = "farm-a/"
	s, err := NewS3Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, s)

	if _, err := NewS3Store(context.Background(), S3Config{Endpoint: cfg.Endpoint, Insecure: true, Bucket: "nope",
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing bucket: %v", err)
	}
	if _, err := NewS3Store(context.Background(), S3Config{Endpoint: "http://" + cfg.Endpoint, Bucket: "traces"}); err == nil {
		t.Error("an endpoint with a scheme is accepted")
	}
}

// The whole server over the S3 store: a loop uploads, a reader reads.
func TestServerOverS3(t *testing.T) {
	s3, err := NewS3Store(context.Background(), versityGateway(t))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.srv.Store = s3
	ns, tok, base := settingsRun(t)
	if code, body := f.do("PUT", base+"/events/5-0", tok, []byte(fmt.Sprintf(session, ns+"/settings")+doneLine)); code != http.StatusNoContent {
		t.Fatalf("upload: %d %s", code, body)
	}
	shot := screenJPEG(t, 80)
	f.do("PUT", base+"/screens/screen-t0001-1.jpg", tok, shot)
	vt := viewer(t, ns, ns)
	if code, body := f.do("GET", base+"/screens/screen-t0001-1.jpg", vt, nil); code != http.StatusOK || body != string(shot) {
		t.Errorf("screen: %d, %d bytes", code, len(body))
	}
	code, page := f.do("GET", "/runs/"+ns+"/settings", vt, nil)
	if code != http.StatusOK || !strings.Contains(page, `data-bbox="0.4,0.6,0.58,0.66"`) || !strings.Contains(page, "Settings is open.") {
		t.Errorf("run page over S3: %d", code)
	}
}
