package inject

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/camproxy/camproxy/internal/testkit"
)

// serve starts s on a loopback port; the server stops with the test.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(testkit.Patience(t)):
			t.Error("Serve did not return after cancel")
		}
	})
	return ln.Addr().String()
}

// webhookClient calls addr as the apiserver does: trusting only caPEM, and
// verifying the name of the webhook's Service.
func webhookClient(caPEM []byte, serverName string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName},
	}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, cond)
}

func statusOf(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSelfSignedEndToEnd: the injector makes its pair, publishes the certificate
// into the caBundle through the (fake) apiserver, is ready only once it has, and the
// apiserver — trusting nothing but that caBundle and checking the Service's DNS name —
// gets a patch from /mutate. A re-applied manifest that drops the caBundle is repaired.
func TestSelfSignedEndToEnd(t *testing.T) {
	f := newFakeAPIServer(t)
	f.put(t, "camproxy-injector", testMWC())
	f.failGets = 1 // the first attempt fails: readiness must wait
	cfg := DefaultServerConfig()
	cfg.Namespace = "camproxy"
	cfg.Recheck = 50 * time.Millisecond
	s, err := NewServer(cfg, testMutator(t), f.client(t), quietLog(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s)
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // as the kubelet's HTTPS probes
	}}
	if code := statusOf(probe, "https://"+addr+PathReady); code != http.StatusServiceUnavailable {
		t.Errorf("ready before the CA is published: %d", code)
	}
	if code := statusOf(probe, "https://"+addr+PathHealth); code != http.StatusOK {
		t.Errorf("healthz %d", code)
	}
	waitFor(t, "readiness", func() bool { return statusOf(probe, "https://"+addr+PathReady) == http.StatusOK })

	published := f.get(t, "camproxy-injector").Webhooks[2].ClientConfig.CABundle
	if !bytes.Equal(published, s.CA()) {
		t.Fatal("the published caBundle is not the server's certificate")
	}
	for _, name := range ServiceDNSNames("camproxy-injector", "camproxy") {
		c := webhookClient(published, name)
		resp, err := c.Post("https://"+addr+PathPod, "application/json", bytes.NewReader(fixture(t, "plain")))
		if err != nil {
			t.Fatalf("as %s: %v", name, err)
		}
		var a admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || a.Response == nil || !a.Response.Allowed || len(a.Response.Patch) == 0 {
			t.Fatalf("as %s: %v %+v", name, err, a.Response)
		}
	}
	if _, err := webhookClient(published, "camproxy-injector.elsewhere.svc").Get("https://" + addr + PathHealth); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("the certificate is valid for another Service: %v", err)
	}

	f.put(t, "camproxy-injector", testMWC()) // kubectl apply of the manifest: no caBundle
	waitFor(t, "the caBundle restored", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return bytes.Contains(f.objs["camproxy-injector"], []byte(`"caBundle"`))
	})
}

// TestMountedPair: with --tls-cert/--tls-key nothing is published, and a renewed
// pair (cert-manager rewrote the Secret) is served without a restart.
func TestMountedPair(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func() []byte {
		c, k, err := SelfSigned(ServiceDNSNames("camproxy-injector", "camproxy"), time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, k, 0o600); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := write()
	f := newFakeAPIServer(t) // must not be called
	cfg := DefaultServerConfig()
	cfg.CertFile, cfg.KeyFile, cfg.Recheck = certFile, keyFile, 20*time.Millisecond
	s, err := NewServer(cfg, testMutator(t), f.client(t), quietLog(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if s.CA() != nil {
		t.Error("a mounted pair has no CA to publish")
	}
	addr := serve(t, s)
	name := "camproxy-injector.camproxy.svc"
	if code := statusOf(webhookClient(first, name), "https://"+addr+PathReady); code != http.StatusOK {
		t.Fatalf("ready: %d", code)
	}
	time.Sleep(30 * time.Millisecond) // a new mtime
	second := write()
	waitFor(t, "the renewed pair", func() bool {
		c := webhookClient(second, name)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		return statusOf(c, "https://"+addr+PathHealth) == http.StatusOK
	})
	f.mu.Lock()
	if f.gets != 0 || f.patchN != 0 {
		t.Errorf("the apiserver was called: %d gets, %d patches", f.gets, f.patchN)
	}
	f.mu.Unlock()

	cfg.CertFile = filepath.Join(dir, "missing.crt")
	if _, err := NewServer(cfg, testMutator(t), nil, quietLog(), time.Now); err == nil {
		t.Error("a missing certificate file was accepted")
	}
}

func TestServerConfigValidate(t *testing.T) {
	ok := DefaultServerConfig()
	ok.Namespace = "camproxy"
	cases := []struct {
		name string
		edit func(*ServerConfig)
		want []string // "" = valid
	}{
		{"defaults", func(*ServerConfig) {}, nil},
		{"mounted pair needs no namespace", func(c *ServerConfig) { c.CertFile, c.KeyFile, c.Namespace = "a", "b", "" }, nil},
		{"listen", func(c *ServerConfig) { c.Listen = "8443" }, []string{"listen"}},
		{"half a pair", func(c *ServerConfig) { c.CertFile = "a" }, []string{"give both or neither"}},
		{"names", func(c *ServerConfig) { c.Service, c.Namespace = "Bad_Name", "" }, []string{"service", "namespace"}},
		{"webhook config", func(c *ServerConfig) { c.WebhookConfig = "UPPER" }, []string{"webhook config"}},
		{"durations", func(c *ServerConfig) { c.CertValidity, c.Recheck = 0, 0 }, []string{"cert validity", "recheck"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			err := cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want %q", err, w)
				}
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"defaults", func(*Options) {}, nil},
		{"no resources", func(o *Options) { o.CPURequest, o.MemoryRequest, o.CPULimit, o.MemoryLimit = "", "", "", "" }, nil},
		{"image", func(o *Options) { o.Image = "" }, []string{"image"}},
		{"pull policy", func(o *Options) { o.ImagePullPolicy = "Sometimes" }, []string{"pull policy"}},
		{"config map", func(o *Options) { o.ConfigMap = "No_Such" }, []string{"config map"}},
		{"arms", func(o *Options) { o.Arms = []string{"cam", "a b", "cam-1", "cam_1"} }, []string{`"a b"`, `"cam-1" and "cam_1" share the variable CAMPROXY_WEIGHT_CAM_1`}},
		{"quantities", func(o *Options) { o.CPULimit, o.MemoryRequest = "lots", "1Q" }, []string{"cpu limit", "memory request"}},
		{"self label", func(o *Options) { o.SelfLabel = "novalue" }, []string{"self label"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions()
			c.edit(&o)
			err := o.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want %q", err, w)
				}
			}
		})
	}
}

func TestWeightEnv(t *testing.T) {
	for arm, want := range map[string]string{"baseline": "CAMPROXY_WEIGHT_BASELINE", "cam-v2.1": "CAMPROXY_WEIGHT_CAM_V2_1", "RAG_k3": "CAMPROXY_WEIGHT_RAG_K3"} {
		if got := WeightEnv(arm); got != want {
			t.Errorf("WeightEnv(%q) = %s, want %s", arm, got, want)
		}
	}
}
