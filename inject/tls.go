package inject

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// ServiceDNSNames are the names the apiserver may use for a webhook Service.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// SelfSigned makes a key pair whose certificate is its own CA: the caBundle the
// apiserver needs is the certificate itself. Both are PEM.
func SelfSigned(dnsNames []string, now time.Time, valid time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("serial: %w", err)
	}
	cn := "camproxy-injector"
	if len(dnsNames) > 0 {
		cn = dnsNames[len(dnsNames)-1]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"camproxy"}},
		DNSNames:              dnsNames,
		NotBefore:             now.Add(-5 * time.Minute), // clock skew
		NotAfter:              now.Add(valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// certFiles serves a key pair from files and picks up a new pair when they change,
// as when cert-manager renews the Secret mounted there. A pair that does not load
// is logged by the caller's TLS stack; the last good one keeps serving.
type certFiles struct {
	certFile, keyFile string
	every             time.Duration // how often the files are checked
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

func newCertFiles(certFile, keyFile string, every time.Duration, now func() time.Time) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, every: every, now: now}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certFiles) load() error {
	stamp := fileStamp(c.certFile) + "|" + fileStamp(c.keyFile)
	if c.cert != nil && stamp == c.stamp {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("tls key pair: %w", err)
	}
	c.cert, c.stamp = &pair, stamp
	return nil
}

// GetCertificate is a tls.Config.GetCertificate.
func (c *certFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.checked) >= c.every {
		c.checked = now
		if err := c.load(); err != nil && c.cert == nil {
			return nil, err
		}
	}
	return c.cert, nil
}

// fileStamp identifies a version of a file (Secret volumes swap a symlink, which
// Stat follows).
func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}
