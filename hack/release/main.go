// Command release builds a clawfarm release into dist/ (internal/release):
// `make release` runs it; docs/release.md describes what it writes.
//
//	go run ./hack/release [--out dist] [--version v0.3.0] [--push host:port]
//	                      [--platforms linux/amd64,linux/arm64]
//	                      [--binaries linux/amd64,linux/arm64,darwin/amd64,darwin/arm64]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/images"
	"github.com/clawfarm/clawfarm/internal/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "dist", "the release directory (replaced)")
	version := flag.String("version", "", "the release's version, v<semver> (default: git describe)")
	push := flag.String("push", "", "registry host:port to push the images and the chart to")
	repo := flag.String("repository", "", "where the chart and install.yaml say the images are (default: <push>/clawfarm, else ghcr.io/clawfarm)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "platforms of the images")
	binaries := flag.String("binaries", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "platforms of kubectl-claw and the rig-host archives")
	url := flag.String("download-url", "", "where the archives are published, for the krew manifest (default: the GitHub release)")
	helm := flag.String("helm", os.Getenv("HELM"), "the helm binary (make release builds it: hack/build-helm.sh)")
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
	bins, err := images.ParsePlatforms(*binaries)
	if err != nil {
		return err
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "[release] "+f+"\n", a...) }
	t := time.Now()
	res, err := release.Build(ctx, release.Options{
		Root: root, Out: *out, Version: *version, Registry: *push, Repository: *repo,
		Platforms: pfs, Binaries: bins, DownloadURL: *url, Helm: *helm, Log: logf,
	})
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(*out)
	logf("wrote %s (%d files and the image layout) in %.1fs", abs, len(res.Files), time.Since(t).Seconds())
	names := make([]string, 0, len(res.Images))
	for n := range res.Images {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("image %-16s %s\n", n, res.Images[n])
	}
	fmt.Printf("chart %s\n", res.Chart)
	if res.ChartRef != "" {
		fmt.Printf("chart %s --version %s\n", res.ChartRef, res.ChartVersion)
	}
	return nil
}
