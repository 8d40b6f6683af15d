// Command images builds clawfarm's OCI images (internal/images) into an OCI
// image layout and, with --push, pushes them to a registry. `make images`
// runs it; docs/images.md describes the result.
//
//	go run ./hack/images [--out bin/images] [--platforms linux/amd64,linux/arm64]
//	                     [--release linux/amd64,linux/arm64,darwin/arm64] [--push host:port]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "bin/images", "the OCI image layout directory (replaced)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "platforms of each image; \"host\" is linux on this machine's architecture")
	names := flag.String("images", strings.Join(images.Default, ","), "programs to build, each ./cmd/<name>")
	release := flag.String("release", "linux/amd64,linux/arm64,darwin/arm64", "platforms rignode is built for as a release binary (empty: none)")
	releaseDir := flag.String("release-dir", "bin/release", "where the release binaries go")
	repo := flag.String("repository", "clawfarm", "repository prefix of the image names")
	push := flag.String("push", "", "registry host:port to push the images to")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	pfs, err := images.ParsePlatforms(*platforms)
	if err != nil {
		return err
	}
	var rel []images.Platform
	if *release != "" {
		if rel, err = images.ParsePlatforms(*release); err != nil {
			return err
		}
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "[images] "+f+"\n", a...) }
	t := time.Now()
	built, err := images.Build(ctx, images.Options{
		Root: root, Out: *out, Images: strings.Split(*names, ","), Platforms: pfs, Repository: *repo,
		Release: rel, ReleaseDir: *releaseDir, Log: logf,
	})
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(*out)
	logf("wrote %s in %.1fs", abs, time.Since(t).Seconds())
	for _, b := range built {
		fmt.Printf("%-40s %s\n", b.Ref, b.Digest)
	}
	if *push == "" {
		return nil
	}
	pushed, err := images.Push(ctx, built, *push)
	if err != nil {
		return err
	}
	for _, p := range pushed {
		fmt.Printf("pushed %s:%s  %s\n", p.Repository, p.Tag, p.Ref())
	}
	return nil
}
