package trace

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Flags are clawfarm-server's command line (docs/ui.md, "Flags"); the chart's
// tests parse the Deployment's args with them.
type Flags struct {
	Listen, StoreDir  string
	Retention, Sweep  time.Duration
	Audience          string
	CertFile, KeyFile string
	Kubeconfig        string
	// MaxAttemptBytes caps what one attempt may upload, events and screens.
	MaxAttemptBytes int64
	// S3 is the bucket to store traces in instead of StoreDir, when its
	// Bucket is set; its credentials come from the environment.
	S3 S3Config
}

// NewFlags defines the flags on fs.
func NewFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Listen, "listen", ":8080", "address the API and the UI listen on")
	fs.StringVar(&f.StoreDir, "store-dir", "/var/lib/clawfarm/traces", "where traces are stored (a PersistentVolume)")
	fs.DurationVar(&f.Retention, "retention", 30*24*time.Hour, "how long an attempt's trace is kept after its last upload; 0 keeps it as long as its run")
	fs.DurationVar(&f.Sweep, "sweep-interval", 10*time.Minute, "how often traces past retention, or of deleted runs, are removed")
	fs.StringVar(&f.Audience, "audience", DefaultAudience, "the audience loop pods' tokens must carry")
	fs.StringVar(&f.CertFile, "tls-cert-file", "", "serve HTTPS with this certificate (with --tls-private-key-file)")
	fs.StringVar(&f.KeyFile, "tls-private-key-file", "", "the certificate's key")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster, then $KUBECONFIG)")
	fs.Int64Var(&f.MaxAttemptBytes, "max-attempt-bytes", DefaultMaxAttemptBytes, "the most one attempt may upload, events and screens; past it an upload gets 413 and the rest stays in the rig's local trace")
	fs.StringVar(&f.S3.Bucket, "s3-bucket", "", "store traces in this S3 bucket instead of --store-dir (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	fs.StringVar(&f.S3.Endpoint, "s3-endpoint", "", "the S3-compatible endpoint, host[:port] (e.g. s3.amazonaws.com, minio.storage:9000)")
	fs.StringVar(&f.S3.Region, "s3-region", "", "the bucket's region, if the endpoint needs one")
	fs.StringVar(&f.S3.Prefix, "s3-prefix", "", "a folder of the bucket to keep the traces in, ending with /")
	fs.BoolVar(&f.S3.Insecure, "s3-insecure", false, "speak plain HTTP to the S3 endpoint")
	return f
}

// Check refuses what the flag package cannot.
func (f *Flags) Check() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if f.Retention < 0 || f.Sweep <= 0 {
		return errors.New("--retention must be 0 or more and --sweep-interval more than 0")
	}
	if (f.S3.Bucket == "") != (f.S3.Endpoint == "") {
		return errors.New("--s3-bucket and --s3-endpoint go together")
	}
	if f.MaxAttemptBytes < MaxChunkBytes {
		return fmt.Errorf("--max-attempt-bytes must be at least one chunk, %d", MaxChunkBytes)
	}
	if f.Audience == "" {
		return errors.New("--audience must not be empty: loop tokens would be the API server's")
	}
	return nil
}
