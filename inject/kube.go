package inject

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account token, CA and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ErrConflict: the object changed between a read and a conditional patch; read again.
var ErrConflict = errors.New("conflict")

// Client is the little of the Kubernetes API the injector needs, over net/http:
// read and JSON-Patch MutatingWebhookConfigurations.
type Client struct {
	base      *url.URL
	tokenFile string
	hc        *http.Client
}

// NewClient talks to the apiserver at base (https://host:port), trusting caPEM and
// authenticating with the bearer token in tokenFile, read at every call since
// projected tokens rotate.
func NewClient(base string, caPEM []byte, tokenFile string) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("apiserver %q: want https://host:port", base)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("apiserver CA: no PEM certificate")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	return &Client{base: u, tokenFile: tokenFile, hc: &http.Client{Transport: tr, Timeout: 15 * time.Second}}, nil
}

// InCluster is a Client for the apiserver of the cluster the pod runs in, from
// $KUBERNETES_SERVICE_HOST/_PORT and the service account in saDir.
func InCluster(getenv func(string) (string, bool), saDir string) (*Client, error) {
	host, _ := getenv("KUBERNETES_SERVICE_HOST")
	port, _ := getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a Kubernetes cluster: KUBERNETES_SERVICE_HOST/_PORT are not set")
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("apiserver CA: %w", err)
	}
	return NewClient("https://"+net.JoinHostPort(host, port), ca, filepath.Join(saDir, "token"))
}

const mwcPath = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"

// GetMutatingWebhookConfiguration returns the object's JSON.
func (c *Client) GetMutatingWebhookConfiguration(ctx context.Context, name string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, mwcPath+url.PathEscape(name), "", nil)
}

// PatchMutatingWebhookConfiguration applies a JSON Patch. A failed "test" operation
// (the object changed) or a resourceVersion conflict is ErrConflict.
func (c *Client) PatchMutatingWebhookConfiguration(ctx context.Context, name string, patch []byte) error {
	_, err := c.do(ctx, http.MethodPatch, mwcPath+url.PathEscape(name), "application/json-patch+json", patch)
	return err
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	u := *c.base
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return out, nil
	}
	// The apiserver explains itself in a metav1.Status.
	var st struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	msg := strings.TrimSpace(string(out))
	if json.Unmarshal(out, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	if resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusUnprocessableEntity {
		return nil, fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return nil, err
}
