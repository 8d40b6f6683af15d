package devcluster

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// rignodeSettings is what one rignode agent needs.
type rignodeSettings struct {
	Kubeconfig, Node string
	Port             int
	Cert, Key, CA    string
	Root             string
	// AllowedImages is the --allowed-images prefix (the cluster's registry).
	AllowedImages string
	// ImageMap is an optional --image-map (development override of pulls).
	ImageMap      string
	Labels, Taint string
}

// rignodeArgs renders rignode's flags (docs/rignode.md).
func rignodeArgs(s rignodeSettings) []string {
	args := []string{
		"--kubeconfig=" + s.Kubeconfig, "--node-name=" + s.Node,
		"--node-ip=127.0.0.1", "--address=127.0.0.1", fmt.Sprintf("--port=%d", s.Port),
		"--tls-cert-file=" + s.Cert, "--tls-private-key-file=" + s.Key, "--client-ca-file=" + s.CA,
		"--root-dir=" + s.Root, "--image-pull-backoff=2s",
	}
	if s.AllowedImages != "" {
		args = append(args, "--allowed-images="+s.AllowedImages)
	}
	if s.ImageMap != "" {
		args = append(args, "--image-map="+s.ImageMap)
	}
	if s.Labels != "" {
		args = append(args, "--node-labels="+s.Labels)
	}
	if s.Taint != "" {
		args = append(args, "--register-with-taints="+s.Taint)
	}
	return args
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func labelSelector(s string) (labels.Selector, error) { return labels.Parse(s) }
