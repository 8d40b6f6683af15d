package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// certValidity is long enough for any dev cluster and short enough to be obviously a dev CA.
const certValidity = 365 * 24 * time.Hour

// PKI is the dev cluster's certificate authority and every key the
// components use, as files under one directory.
type PKI struct {
	Dir string
}

// File is the path of a PKI file by name (ca.crt, admin.key…).
func (p PKI) File(name string) string { return filepath.Join(p.Dir, name) }

// identity is one client or serving certificate the cluster needs.
type identity struct {
	name   string // file stem
	cn     string
	orgs   []string
	server bool // a serving certificate for 127.0.0.1 / localhost
	client bool
	extra  []string // extra DNS names
	ips    []net.IP
}

// identities lists the certificates: the apiserver's serving certificate and
// each component's client identity. The user, rignode and the apiserver's
// kubelet client are system:masters (the kubelet node is not) (a dev cluster: nothing to protect from
// them); the controller-manager, the scheduler and a host-process manager get
// their own users, so RBAC sees what a real cluster would.
func identities(nodes []string) []identity {
	loop := []net.IP{net.ParseIP("127.0.0.1")}
	ids := []identity{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			extra: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips:   append(loop, net.ParseIP(ServiceIP))},
		{name: "admin", cn: "clawfarm-dev-admin", orgs: []string{"system:masters"}, client: true},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true},
		{name: "kube-controller-manager", cn: "system:kube-controller-manager", client: true},
		{name: "kube-scheduler", cn: "system:kube-scheduler", client: true},
		{name: "manager", cn: HostManagerUser, client: true},
		{name: "rig-gateway", cn: RigGatewayUser, client: true},
	}
	for _, n := range nodes {
		orgs := []string{"system:nodes", "system:masters"}
		if isKubeletNode(n) {
			// A real kubelet is only a node: the Node authorizer and
			// NodeRestriction hold it to its own node and pods.
			orgs = []string{"system:nodes"}
		}
		ids = append(ids, identity{name: "node-" + n, cn: "system:node:" + n, orgs: orgs, client: true, server: true, ips: loop})
	}
	return ids
}

// EnsurePKI creates the CA, the service-account key pair and every
// certificate under dir, keeping files that already exist (so a kubeconfig
// handed out earlier stays valid).
func EnsurePKI(dir string, nodes []string) (PKI, error) {
	p := PKI{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return p, fmt.Errorf("certificate authority: %w", err)
	}
	if err := p.ensureServiceAccountKey(); err != nil {
		return p, fmt.Errorf("service-account signing key: %w", err)
	}
	for _, id := range identities(nodes) {
		if exists(p.File(id.name+".crt")) && exists(p.File(id.name+".key")) {
			continue
		}
		if err := p.issue(id, caCert, caKey); err != nil {
			return p, fmt.Errorf("certificate %s: %w", id.name, err)
		}
	}
	return p, nil
}

func (p PKI) ensureCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if exists(p.File("ca.crt")) && exists(p.File("ca.key")) {
		cert, err := readCert(p.File("ca.crt"))
		if err != nil {
			return nil, nil, err
		}
		key, err := readECKey(p.File("ca.key"))
		return cert, key, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "clawfarm-dev-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writeKey(p.File("ca.key"), key); err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(p.File("ca.crt"), "CERTIFICATE", der, 0o644)
}

func (p PKI) ensureServiceAccountKey() error {
	if exists(p.File("sa.key")) && exists(p.File("sa.pub")) {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.File("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(p.File("sa.pub"), "PUBLIC KEY", pub, 0o644)
}

func (p PKI) issue(id identity, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.cn, Organization: id.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if id.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if id.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = append([]string{"localhost"}, id.extra...)
		tmpl.IPAddresses = id.ips
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(p.File(id.name+".key"), key); err != nil {
		return err
	}
	return writePEM(p.File(id.name+".crt"), "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readCert(path string) (*x509.Certificate, error) {
	der, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func readECKey(path string) (*ecdsa.PrivateKey, error) {
	der, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseECPrivateKey(der)
}

// readPEM returns the bytes of the first PEM block in a file.
func readPEM(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not PEM", path)
	}
	return blk.Bytes, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// tokenFile is the API server's --token-auth-file: one static bearer token,
// for the same user as the admin certificate.
const tokenFile = "tokens.csv"

// adminToken returns the admin's bearer token, creating it (and the token
// file) once, so kubeconfigs handed out earlier stay valid.
func adminToken(p PKI) (string, error) {
	b, err := os.ReadFile(p.File("admin.token"))
	tok := strings.TrimSpace(string(b))
	if err != nil || len(tok) < 32 {
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		tok = hex.EncodeToString(raw)
		if err := os.WriteFile(p.File("admin.token"), []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	// token,user,uid,"group1,group2" — the admin certificate's user and groups.
	line := fmt.Sprintf("%s,clawfarm-dev-admin,clawfarm-dev-admin,\"system:masters\"\n", tok)
	return tok, os.WriteFile(p.File(tokenFile), []byte(line), 0o600)
}
