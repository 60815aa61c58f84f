package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// fakeAPIServer plays the apiserver's part for MutatingWebhookConfigurations: bearer
// auth, GET, and JSON Patch with "test" operations, answering 422 when one fails,
// as the real one does.
type fakeAPIServer struct {
	*httptest.Server
	token  string
	saDir  string // a service account directory: token and ca.crt
	mu     sync.Mutex
	objs   map[string][]byte
	rv     int
	gets   int
	patchN int
	// failGets answers 503 to that many GETs first.
	failGets int
	// beforePatch runs under the lock before each PATCH is applied (a concurrent writer).
	beforePatch func(f *fakeAPIServer, name string)
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{token: "sa-token-1", objs: map[string][]byte{}}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	// A client refusing the server's certificate is a case under test: its TLS
	// handshake error goes to the test's output, not to stderr.
	f.Config.ErrorLog = log.New(t.Output(), "", 0)
	f.StartTLS()
	t.Cleanup(f.Close)
	f.saDir = t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(f.saDir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.saDir, "token"), []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeAPIServer) client(t *testing.T) *Client {
	t.Helper()
	u, _ := url.Parse(f.URL)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}
	c, err := InCluster(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, f.saDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// put stores an object, as kubectl apply would, with a new resourceVersion.
func (f *fakeAPIServer) put(t *testing.T, name string, obj *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	obj.ResourceVersion = strconv.Itoa(f.rv)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	f.objs[name] = b
}

func (f *fakeAPIServer) get(t *testing.T, name string) admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var o admissionregistrationv1.MutatingWebhookConfiguration
	dec := json.NewDecoder(bytes.NewReader(f.objs[name]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("the stored object does not strict-decode: %v", err)
	}
	return o
}

func (f *fakeAPIServer) status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": msg, "reason": reason, "code": code})
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		f.status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, mwcPath)
	if !ok {
		f.status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	obj, ok := f.objs[name]
	if !ok {
		f.status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("mutatingwebhookconfigurations.admissionregistration.k8s.io %q not found", name))
		return
	}
	switch r.Method {
	case http.MethodGet:
		f.gets++
		if f.failGets > 0 {
			f.failGets--
			f.status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "etcd is having a moment")
			return
		}
		_, _ = w.Write(obj)
	case http.MethodPatch:
		if ct := r.Header.Get("Content-Type"); ct != "application/json-patch+json" {
			f.status(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", "content type "+ct)
			return
		}
		f.patchN++
		if f.beforePatch != nil {
			f.beforePatch(f, name)
			obj = f.objs[name]
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		p, err := jsonpatch.DecodePatch(body.Bytes())
		if err != nil {
			f.status(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		out, err := p.Apply(obj)
		if err != nil {
			f.status(w, http.StatusUnprocessableEntity, "Invalid", err.Error())
			return
		}
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		f.rv++
		m["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
		out, _ = json.Marshal(m)
		f.objs[name] = out
		_, _ = w.Write(out)
	default:
		f.status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
	}
}

// testMWC is the shape of the Helm chart's MutatingWebhookConfiguration, plus a webhook
// of somebody else's that must be left alone.
func testMWC() *admissionregistrationv1.MutatingWebhookConfiguration {
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	hook := func(name, svc, path string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: name, AdmissionReviewVersions: []string{"v1", "v1beta1"},
			FailurePolicy: &ignore, SideEffects: &none,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Name: svc, Namespace: "camproxy", Path: ptr(path)},
			},
		}
	}
	o := &admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{
		hook("namespace.inject.camproxy.io", "camproxy-injector", PathNamespace),
		hook("other.example.com", "other", "/mutate"),
		hook("pod.inject.camproxy.io", "camproxy-injector", PathPod),
	}}
	o.Name = "camproxy-injector"
	o.APIVersion, o.Kind = "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"
	return o
}

func selfSigned(t *testing.T, now time.Time, valid time.Duration) []byte {
	t.Helper()
	c, _, err := SelfSigned(ServiceDNSNames("camproxy-injector", "camproxy"), now, valid)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bundleOf(t *testing.T, f *fakeAPIServer, i int) [][]byte {
	t.Helper()
	certs, err := parseCerts(f.get(t, "camproxy-injector").Webhooks[i].ClientConfig.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return out
}

func TestPublishCA(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	f := newFakeAPIServer(t)
	f.put(t, "camproxy-injector", testMWC())
	api := f.client(t)
	replicaA, replicaB := selfSigned(t, now, 24*time.Hour), selfSigned(t, now.Add(time.Minute), 24*time.Hour)

	t.Run("first publication", func(t *testing.T) {
		changed, err := PublishCA(ctx, api, "camproxy-injector", "camproxy-injector", "camproxy", replicaA, now)
		if err != nil || !changed {
			t.Fatalf("changed %v err %v", changed, err)
		}
		for _, i := range []int{0, 2} {
			if b := bundleOf(t, f, i); len(b) != 1 || !bytes.Equal(b[0], replicaA) {
				t.Errorf("webhook %d bundle %d certs, want replica A's", i, len(b))
			}
		}
		if b := f.get(t, "camproxy-injector").Webhooks[1].ClientConfig.CABundle; b != nil {
			t.Errorf("another Service's webhook was given a caBundle")
		}
	})
	t.Run("again: nothing to do", func(t *testing.T) {
		before := f.patchN
		changed, err := PublishCA(ctx, api, "camproxy-injector", "camproxy-injector", "camproxy", replicaA, now)
		if err != nil || changed || f.patchN != before {
			t.Fatalf("changed %v err %v patches %d", changed, err, f.patchN-before)
		}
	})
	t.Run("a second replica adds its own", func(t *testing.T) {
		if _, err := PublishCA(ctx, api, "camproxy-injector", "camproxy-injector", "camproxy", replicaB, now); err != nil {
			t.Fatal(err)
		}
		if b := bundleOf(t, f, 2); len(b) != 2 || !bytes.Equal(b[0], replicaA) || !bytes.Equal(b[1], replicaB) {
			t.Fatalf("bundle of %d certs, want A then B", len(b))
		}
	})
	t.Run("expired certificates go", func(t *testing.T) {
		later := now.Add(48 * time.Hour)
		replicaC := selfSigned(t, later, 24*time.Hour)
		if _, err := PublishCA(ctx, api, "camproxy-injector", "camproxy-injector", "camproxy", replicaC, later); err != nil {
			t.Fatal(err)
		}
		if b := bundleOf(t, f, 0); len(b) != 1 || !bytes.Equal(b[0], replicaC) {
			t.Fatalf("bundle of %d certs, want only C", len(b))
		}
	})
	t.Run("a concurrent writer costs one more round", func(t *testing.T) {
		f.put(t, "camproxy-injector", testMWC())
		f.mu.Lock()
		f.beforePatch = func(f *fakeAPIServer, name string) {
			f.beforePatch = nil
			var m map[string]any
			_ = json.Unmarshal(f.objs[name], &m)
			f.rv++
			m["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
			f.objs[name], _ = json.Marshal(m)
		}
		before := f.patchN
		f.mu.Unlock()
		changed, err := PublishCA(ctx, api, "camproxy-injector", "camproxy-injector", "camproxy", replicaA, now)
		if err != nil || !changed {
			t.Fatalf("changed %v err %v", changed, err)
		}
		if n := f.patchN - before; n != 2 {
			t.Errorf("%d patches, want 2 (one lost to the conflict)", n)
		}
		if b := bundleOf(t, f, 2); len(b) != 1 || !bytes.Equal(b[0], replicaA) {
			t.Fatalf("bundle of %d certs", len(b))
		}
	})

	errCases := []struct {
		name, config, service, token string
		want                         string
		conflict                     bool
	}{
		{"no such config", "nope", "camproxy-injector", f.token, "not found", false},
		{"no webhook calls the service", "camproxy-injector", "elsewhere", f.token, "no webhook calls the Service camproxy/elsewhere", false},
		{"bad token", "camproxy-injector", "camproxy-injector", "stale", "401 Unauthorized", false},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			f.mu.Lock()
			f.token = c.token
			f.mu.Unlock()
			defer func() { f.mu.Lock(); f.token = "sa-token-1"; f.mu.Unlock() }()
			_, err := PublishCA(ctx, api, c.config, c.service, "camproxy", replicaA, now)
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrConflict) != c.conflict {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestClient(t *testing.T) {
	f := newFakeAPIServer(t)
	f.put(t, "x", testMWC())
	t.Run("token re-read at each call", func(t *testing.T) {
		c := f.client(t)
		if _, err := c.GetMutatingWebhookConfiguration(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.token = "sa-token-2" // the kubelet rotated the projected token
		f.mu.Unlock()
		if err := os.WriteFile(filepath.Join(f.saDir, "token"), []byte("sa-token-2"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetMutatingWebhookConfiguration(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a conflicting patch is ErrConflict", func(t *testing.T) {
		err := f.client(t).PatchMutatingWebhookConfiguration(context.Background(), "x",
			[]byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"0"}]`))
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("the apiserver's CA only", func(t *testing.T) {
		ca := selfSigned(t, time.Now(), time.Hour) // some other CA
		c, err := NewClient(f.URL, ca, filepath.Join(f.saDir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetMutatingWebhookConfiguration(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("err %v, want a certificate error", err)
		}
	})
	t.Run("not in a cluster", func(t *testing.T) {
		_, err := InCluster(func(string) (string, bool) { return "", false }, f.saDir)
		if err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		for _, base := range []string{"http://127.0.0.1:1", "127.0.0.1:6443", "https://"} {
			if _, err := NewClient(base, nil, ""); err == nil {
				t.Errorf("%q accepted", base)
			}
		}
		if _, err := NewClient(f.URL, []byte("not pem"), ""); err == nil {
			t.Error("a CA without PEM accepted")
		}
	})
}

func TestMergeBundle(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	certs := make([][]byte, maxBundle+2)
	for i := range certs {
		certs[i] = selfSigned(t, now.Add(time.Duration(i)*time.Minute), 24*time.Hour)
	}
	expired := selfSigned(t, now.Add(-72*time.Hour), time.Hour)
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name     string
		old, add []byte
		want     [][]byte
		same     bool // old returned untouched
	}{
		{"empty", nil, certs[0], [][]byte{certs[0]}, false},
		{"garbage is replaced", []byte("not a bundle"), certs[0], [][]byte{certs[0]}, false},
		{"present", cat(certs[0], certs[1]), certs[0], nil, true},
		{"appended newest last", cat(certs[1], certs[0]), certs[2], [][]byte{certs[0], certs[1], certs[2]}, false},
		{"expired dropped", cat(expired, certs[0]), certs[0], [][]byte{certs[0]}, false},
		{"capped, the oldest go", cat(certs[:maxBundle]...), certs[maxBundle+1], append(append([][]byte{}, certs[1:maxBundle]...), certs[maxBundle+1]), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mergeBundle(c.old, c.add, now)
			if err != nil {
				t.Fatal(err)
			}
			if c.same {
				if !bytes.Equal(got, c.old) {
					t.Fatal("changed a bundle that already had the CA")
				}
				return
			}
			if want := cat(c.want...); !bytes.Equal(got, want) {
				gc, _ := parseCerts(got)
				t.Fatalf("bundle of %d certs, want %d", len(gc), len(c.want))
			}
		})
	}
	if _, err := mergeBundle(nil, []byte("nothing"), now); err == nil {
		t.Error("an empty CA was published")
	}
}
