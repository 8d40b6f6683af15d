package rignode

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An image whose symlink points out of its root cannot carry a later
// entry's write (or a hard link's source) through it.
func TestUntarRefusesWritesThroughSymlinks(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	for _, second := range []*tar.Header{
		{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		{Name: "stolen", Typeflag: tar.TypeLink, Linkname: "etc/secret"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: outside}); err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(second); err != nil {
			t.Fatal(err)
		}
		if second.Size > 0 {
			_, _ = tw.Write([]byte("x"))
		}
		_ = tw.Close()
		err := untar(&buf, filepath.Join(t.TempDir(), "rootfs"))
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("%s: untar gave %v, want a refusal naming the symbolic link", second.Name, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a file was written outside the image root: %v", entries)
	}
}

// Ordinary entries, a relative symlink and a hard link unpack.
func TestUntarUnpacksFilesLinksAndDirs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/tool", Typeflag: tar.TypeReg, Mode: 0o755, Size: 2},
		{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"},
		{Name: "usr/bin/alias", Typeflag: tar.TypeLink, Linkname: "usr/bin/tool"},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("ok"))
		}
	}
	_ = tw.Close()
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := untar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"usr/bin/tool", "bin/tool", "usr/bin/alias"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != "ok" {
			t.Fatalf("%s: %q %v", f, b, err)
		}
	}
}
