package images

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"encoding/pem"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	// NonRootUID is the user (and group) every image runs as: distroless's nonroot.
	NonRootUID = 65532
	// CAFile is where the images keep the CA certificates (SSL_CERT_FILE names it).
	CAFile = "/etc/ssl/certs/ca-certificates.crt"
)

// entry is one file or directory of a layer (a directory's name ends in /).
type entry struct {
	name string
	mode int64
	uid  int
	data []byte
}

func dir(name string) entry { return entry{name: name, mode: 0o755} }

// layer is a gzip'd tar of entries, in order, every timestamp at mtime and
// no user or group names: the same entries always give the same digest.
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// baseLayer is what every image shares: /etc/passwd and /etc/group with root
// and nonroot (65532), the CA certificates, a home for nonroot and /tmp.
func baseLayer(mtime time.Time) (v1.Layer, error) {
	return layer([]entry{
		dir("etc/"),
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		dir("etc/ssl/"), dir("etc/ssl/certs/"),
		{name: strings.TrimPrefix(CAFile, "/"), mode: 0o644, data: CACertificates()},
		dir("home/"),
		{name: "home/nonroot/", mode: 0o700, uid: NonRootUID},
		{name: "tmp/", mode: 0o1777},
	}, mtime)
}

// CACertificates is the NSS root store as PEM, from the Go module
// golang.org/x/crypto/x509roots/fallback (pinned by go.sum, so every machine
// builds the same bytes). Roots with constraints a PEM file cannot carry (a
// distrust-after date) are left out.
func CACertificates() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// SBOM is an SPDX 2.3 document of one binary: the program and every Go
// module linked into it, read from the binary's build information.
func SBOM(bin, name, version string, created time.Time, pf v1.Platform) ([]byte, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		Name             string `json:"name"`
		SPDXID           string `json:"SPDXID"`
		Version          string `json:"versionInfo,omitempty"`
		DownloadLocation string `json:"downloadLocation"`
		FilesAnalyzed    bool   `json:"filesAnalyzed"`
		ExternalRefs     []ref  `json:"externalRefs,omitempty"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	purl := func(path, v string) []ref {
		return []ref{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + v}}
	}
	root := pkg{Name: name, SPDXID: "SPDXRef-Package-" + name, Version: version, DownloadLocation: "https://" + Module,
		ExternalRefs: purl(Module, version)}
	pkgs := []pkg{root, {Name: "go", SPDXID: "SPDXRef-Package-go", Version: bi.GoVersion, DownloadLocation: "https://go.dev/dl/"}}
	rels := []rel{
		{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: root.SPDXID},
		{Element: root.SPDXID, Type: "DEPENDS_ON", Related: "SPDXRef-Package-go"},
	}
	deps := bi.Deps
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for i, d := range deps {
		if d.Replace != nil {
			d = d.Replace
		}
		id := "SPDXRef-Package-dep-" + strconv.Itoa(i)
		pkgs = append(pkgs, pkg{Name: d.Path, SPDXID: id, Version: d.Version, DownloadLocation: "https://proxy.golang.org/" + d.Path, ExternalRefs: purl(d.Path, d.Version)})
		rels = append(rels, rel{Element: root.SPDXID, Type: "DEPENDS_ON", Related: id})
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              name + "-" + version + "-" + pf.OS + "-" + pf.Architecture,
		"documentNamespace": "https://" + Module + "/spdx/" + name + "/" + version + "/" + pf.OS + "-" + pf.Architecture,
		"creationInfo": map[string]any{
			"created":  created.UTC().Format(time.RFC3339),
			"creators": []string{"Tool: clawfarm-images"},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}
