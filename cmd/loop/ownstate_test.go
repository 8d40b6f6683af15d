package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
)

func ownerOf(t *testing.T, dir string) (uid, gid uint32, perm fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode().Perm()
}

// The init step gives a root-owned directory (what a kubelet creates for a
// missing hostPath) to the loop's user, adds the owner's rights, and leaves
// it alone when it already belongs to that user or when it is not root.
func TestOwnStateGivesTheDirectoryToTheLoopsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test changes a directory's owner: run it as root (CI does)")
	}
	dir := filepath.Join(t.TempDir(), "rig-0")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}

	msg, err := takeOwnership(dir, 65532, -1, 1000)
	if err != nil || !strings.Contains(msg, "not root") {
		t.Fatalf("as uid 1000: %q, %v; want a note that it leaves the directory", msg, err)
	}
	if uid, _, perm := ownerOf(t, dir); uid != 0 || perm != 0o555 {
		t.Fatalf("as uid 1000 the directory changed: uid %d mode %04o", uid, perm)
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{contract.OwnStateCommand, "--dir", dir, "--uid", "65532", "--gid", "65532"}, os.Getenv, &out, &errb); code != 0 {
		t.Fatalf("own-state exit %d: %s", code, errb.String())
	}
	if uid, gid, perm := ownerOf(t, dir); uid != 65532 || gid != 65532 || perm != 0o755 {
		t.Fatalf("after own-state: uid %d gid %d mode %04o, want 65532 65532 0755", uid, gid, perm)
	}
	if !strings.Contains(out.String(), "now belongs to uid 65532 (was uid 0 gid 0 mode 0555)") {
		t.Errorf("own-state said %q", out.String())
	}

	msg, err = takeOwnership(dir, 65532, 65532, 0)
	if err != nil || !strings.Contains(msg, "already belongs") {
		t.Fatalf("second run: %q, %v", msg, err)
	}
}

func TestOwnStateRefusesWhatItCannotUse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := takeOwnership(file, 65532, -1, 0); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file: %v", err)
	}
	if _, err := takeOwnership(filepath.Join(file, "x", "y"), 65532, -1, 0); err == nil || !strings.Contains(err.Error(), "the rig's state directory") {
		t.Errorf("a missing directory: %v", err)
	}
	var errb bytes.Buffer
	if code := ownState([]string{"--dir", t.TempDir()}, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "--uid") {
		t.Errorf("no --uid: exit %d, %q", code, errb.String())
	}
}

// A state directory the loop cannot write is a configuration error that
// names the directory, its owner and the loop's user; a held lock is not.
func TestUnwritableStateIsAConfigurationError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	denied := &fs.PathError{Op: "mkdir", Path: filepath.Join(dir, "logs"), Err: syscall.EACCES}
	err := unwritableState(dir, denied)
	if err == nil {
		t.Fatal("permission denied: no configuration error")
	}
	for _, want := range []string{dir + " (uid ", "mode 0755", "not writable by the loop's user", "mkdir " + dir + "/logs: permission denied", "own-state"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if err := unwritableState(dir, &fs.PathError{Op: "open", Path: dir, Err: syscall.EROFS}); err == nil {
		t.Error("a read-only file system: no configuration error")
	}
	if err := unwritableState(dir, errors.New("the state directory is locked by another loop (pid 12)")); err != nil {
		t.Errorf("a held lock: %v, want nil (a retryable STUCK)", err)
	}
	if err := unwritableState(dir, nil); err != nil {
		t.Errorf("no error: %v", err)
	}
}
