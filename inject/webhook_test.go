package inject

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const testImage = "ghcr.io/camproxy/camproxy:test"

func testOptions() Options {
	o := DefaultOptions(testImage)
	o.Arms = []string{"baseline", "cam"}
	return o
}

func testMutator(t testing.TB) *Mutator {
	t.Helper()
	m, err := NewMutator(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture reads testdata/review/NAME.yaml as the JSON the apiserver sends.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	y, err := os.ReadFile(filepath.Join("testdata", "review", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return j
}

// answer is an AdmissionReview response, either version (their JSON is the same).
type answer struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Response   *admissionv1.AdmissionResponse `json:"response"`
}

// post sends body to the webhook at path and decodes the answer.
func post(t *testing.T, h http.Handler, path string, body []byte) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var a answer
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	return a
}

// strictPod decodes a pod refusing any field core/v1 does not have.
func strictPod(t *testing.T, b []byte) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("the patched pod does not strict-decode into core/v1.Pod: %v\n%s", err, b)
	}
	return p
}

func names(cs []corev1.Container) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func envMap(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "<valueFrom>"
		}
		m[e.Name] = v
	}
	return m
}

func find(cs []corev1.Container, name string) (corev1.Container, bool) {
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return corev1.Container{}, false
	}
	return cs[i], true
}

var sidecarURLs = map[string]string{
	"OPENAI_BASE_URL":                  "http://127.0.0.1:8080/v1",
	"ANTHROPIC_BASE_URL":               "http://127.0.0.1:8080",
	"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:8080",
}

func TestWebhookFixtures(t *testing.T) {
	type want struct {
		init, containers []string                     // every container, in order
		env              map[string]map[string]string // app container → exactly its env
		sidecarEnv       map[string]string            // the sidecar's env, exactly
		configMap        string
		annotations      map[string]string // exactly
		warning          string            // in Warnings
		keep             []string          // JSON fragments of the pod that must survive
	}
	sidecarDefault := map[string]string{EnvListen: "127.0.0.1:8080", EnvAdminListen: ":9090", EnvAdminLoopbackOnly: "true"}
	cases := []struct {
		fixture string
		path    string
		inject  bool
		want    want
	}{
		{"plain", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env:         map[string]map[string]string{"agent": sidecarURLs},
			sidecarEnv:  sidecarDefault,
			configMap:   "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationStatus: StatusInjected},
		}},
		{"v1beta1", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env:         map[string]map[string]string{"agent": sidecarURLs},
			sidecarEnv:  sidecarDefault,
			configMap:   "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationStatus: StatusInjected},
		}},
		{"sets-openai", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env: map[string]map[string]string{"agent": {
				"OPENAI_BASE_URL":                  "https://llm.internal.example/v1", // its own, kept
				"LOG_LEVEL":                        "debug",
				"ANTHROPIC_BASE_URL":               "http://127.0.0.1:8080",
				"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:8080",
			}},
			sidecarEnv:  sidecarDefault,
			configMap:   "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationStatus: StatusInjected},
		}},
		{"override-env", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env: map[string]map[string]string{"agent": {
				"OPENAI_BASE_URL":                  "http://127.0.0.1:8080/v1",
				"ANTHROPIC_BASE_URL":               "http://127.0.0.1:8080", // valueFrom replaced
				"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:8080",
				"LOG_LEVEL":                        "debug",
			}},
			sidecarEnv: sidecarDefault,
			configMap:  "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationOverrideEnv: "true",
				AnnotationStatus: StatusInjected},
		}},
		{"already-injected", PathPod, false, want{}},
		{"host-network", PathPod, false, want{}},
		{"namespace-opt-in", PathNamespace, true, want{
			init: []string{"camproxy"}, containers: []string{"worker"},
			env:         map[string]map[string]string{"worker": sidecarURLs},
			sidecarEnv:  sidecarDefault,
			configMap:   "camproxy",
			annotations: map[string]string{AnnotationStatus: StatusInjected},
		}},
		{"namespace-opt-in", PathPod, false, want{}}, // no annotation, no namespace label
		{"namespace-opt-out", PathNamespace, false, want{}},
		{"regular-container", PathPod, true, want{
			init: []string{"fetch-tools"}, containers: []string{"camproxy", "agent", "tool-server"},
			env: map[string]map[string]string{
				"agent": sidecarURLs, "tool-server": sidecarURLs,
				"fetch-tools": {}, // init containers are left alone
			},
			sidecarEnv: sidecarDefault,
			configMap:  "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationNativeSidecar: "false", "team": "research",
				AnnotationStatus: StatusInjected, annotationDefaultContainer: "agent"},
		}},
		{"native-with-init", PathPod, true, want{
			init: []string{"camproxy", "fetch-tools"}, containers: []string{"agent"},
			env:         map[string]map[string]string{"agent": sidecarURLs, "fetch-tools": {}},
			sidecarEnv:  sidecarDefault,
			configMap:   "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationStatus: StatusInjected},
		}},
		{"pinned", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env: map[string]map[string]string{"agent": sidecarURLs},
			sidecarEnv: map[string]string{EnvListen: "127.0.0.1:8080", EnvAdminListen: ":9090", EnvAdminLoopbackOnly: "true",
				EnvExperiment: "tau-airline-v2", EnvArm: "cam", EnvAdaptive: "false",
				"CAMPROXY_WEIGHT_BASELINE": "0", "CAMPROXY_WEIGHT_CAM": "1"},
			configMap: "camproxy-tau",
			annotations: map[string]string{AnnotationInject: "true", AnnotationExperiment: "tau-airline-v2",
				AnnotationArm: "cam", AnnotationConfig: "camproxy-tau", AnnotationStatus: StatusInjected},
		}},
		{"unknown-arm", PathPod, false, want{warning: `camproxy.io/arm: "rag" is not one of the arms baseline, cam`}},
		{"bad-annotation", PathPod, false, want{warning: `camproxy.io/native-sidecar: "perhaps" is not true or false`}},
		{"self", PathPod, false, want{}},
		{"self", PathNamespace, false, want{}},
		{"not-opted-in", PathPod, false, want{}},
		{"update", PathPod, false, want{}},
		{"deployment", PathPod, false, want{}},
		{"port-conflict", PathPod, false, want{warning: `container "agent" uses port 8080`}},
		{"port-moved", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			env: map[string]map[string]string{"agent": {
				"OPENAI_BASE_URL":                  "http://127.0.0.1:18080/v1",
				"ANTHROPIC_BASE_URL":               "http://127.0.0.1:18080",
				"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:18080",
			}},
			sidecarEnv: map[string]string{EnvListen: "127.0.0.1:18080", EnvAdminListen: ":19090", EnvAdminLoopbackOnly: "true"},
			configMap:  "camproxy",
			annotations: map[string]string{AnnotationInject: "true", AnnotationPort: "18080",
				AnnotationAdminPort: "19090", AnnotationStatus: StatusInjected},
		}},
		{"future-fields", PathPod, true, want{
			init: []string{"camproxy"}, containers: []string{"agent"},
			keep: []string{`"futurePodField":{"mode":"strict"}`, `"futureContainerField":[1,2]`},
		}},
	}
	h := NewHandler(testMutator(t), quietLog(), nil)
	for _, c := range cases {
		t.Run(c.fixture+strings.ReplaceAll(c.path, "/", "_"), func(t *testing.T) {
			body := fixture(t, c.fixture)
			var in struct {
				APIVersion string `json:"apiVersion"`
				Request    struct {
					UID    string          `json:"uid"`
					Object json.RawMessage `json:"object"`
				} `json:"request"`
			}
			if err := json.Unmarshal(body, &in); err != nil {
				t.Fatal(err)
			}
			a := post(t, h, c.path, body)
			if a.APIVersion != in.APIVersion || a.Kind != "AdmissionReview" {
				t.Errorf("answered as %s %s, asked in %s", a.APIVersion, a.Kind, in.APIVersion)
			}
			r := a.Response
			if r == nil || string(r.UID) != in.Request.UID || !r.Allowed {
				t.Fatalf("response %+v: want allowed, uid %s", r, in.Request.UID)
			}
			if c.want.warning != "" && !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, c.want.warning) }) {
				t.Errorf("warnings %q: want one with %q", r.Warnings, c.want.warning)
			}
			if !c.inject {
				if r.Patch != nil || r.PatchType != nil {
					t.Fatalf("want no patch, got %s", r.Patch)
				}
				return
			}
			if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("patchType %v", r.PatchType)
			}
			patch, err := jsonpatch.DecodePatch(r.Patch)
			if err != nil {
				t.Fatalf("decode patch: %v\n%s", err, r.Patch)
			}
			out, err := patch.Apply(in.Request.Object)
			if err != nil {
				t.Fatalf("apply patch: %v\n%s", err, r.Patch)
			}
			golden(t, c.fixture, out)
			for _, k := range c.want.keep {
				if !bytes.Contains(out, []byte(k)) {
					t.Errorf("the patched pod lost %s:\n%s", k, out)
				}
			}
			if c.want.keep != nil {
				return // it has fields core/v1 does not know: it cannot strict-decode
			}
			pod := strictPod(t, out)
			if got := names(pod.Spec.InitContainers); !slices.Equal(got, c.want.init) {
				t.Errorf("initContainers %v, want %v", got, c.want.init)
			}
			if got := names(pod.Spec.Containers); !slices.Equal(got, c.want.containers) {
				t.Errorf("containers %v, want %v", got, c.want.containers)
			}
			for name, env := range c.want.env {
				ct, ok := find(slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers), name)
				if !ok {
					t.Fatalf("no container %s", name)
				}
				if got := envMap(ct); !mapsEqual(got, env) {
					t.Errorf("%s env %v, want %v", name, got, env)
				}
			}
			if !mapsEqual(pod.Annotations, c.want.annotations) {
				t.Errorf("annotations %v, want %v", pod.Annotations, c.want.annotations)
			}
			checkSidecar(t, pod, c.want.sidecarEnv, c.want.configMap)
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkSidecar asserts the properties the issue asks of the injected container.
func checkSidecar(t *testing.T, pod corev1.Pod, env map[string]string, configMap string) {
	t.Helper()
	all := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	c, ok := find(all, ContainerName)
	if !ok {
		t.Fatal("no camproxy container")
	}
	_, native := find(pod.Spec.InitContainers, ContainerName)
	if native != (c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways) {
		t.Errorf("native sidecar %v, restartPolicy %v", native, c.RestartPolicy)
	}
	if c.Image != testImage || !slices.Equal(c.Args, []string{"serve", "--config", "/etc/camproxy/config.yaml"}) {
		t.Errorf("image %s args %v", c.Image, c.Args)
	}
	if got := envMap(c); !mapsEqual(got, env) {
		t.Errorf("sidecar env %v, want %v", got, env)
	}
	if c.WorkingDir != DataDir {
		t.Errorf("workingDir %q: relative ./camproxy-data must land on the emptyDir %s", c.WorkingDir, DataDir)
	}
	admin := c.Ports[1].ContainerPort
	if c.Ports[0].Name != "camproxy" || c.Ports[1].Name != "camproxy-admin" {
		t.Errorf("ports %+v", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "camproxy-admin" {
			t.Errorf("%s probe %+v: want an HTTP GET on the admin port (%d)", name, p, admin)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.StartupProbe.HTTPGet.Path != "/healthz" {
		t.Error("probe paths")
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*sc.RunAsUser != NonRootUID {
		t.Errorf("securityContext %+v", sc)
	}
	if c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Limits.Memory().String() != "512Mi" {
		t.Errorf("resources %+v", c.Resources)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts[ConfigVolume]; m.MountPath != ConfigDir || !m.ReadOnly {
		t.Errorf("config mount %+v", m)
	}
	if m := mounts[DataVolume]; m.MountPath != DataDir || m.ReadOnly {
		t.Errorf("data mount %+v", m)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols[ConfigVolume]; v.ConfigMap == nil || v.ConfigMap.Name != configMap {
		t.Errorf("config volume %+v, want ConfigMap %s", v, configMap)
	}
	if v := vols[DataVolume]; v.EmptyDir == nil {
		t.Errorf("data volume %+v, want an emptyDir", v)
	}
}

// golden compares the patched pod with testdata/golden/NAME.json (-update rewrites it).
func golden(t *testing.T, name string, pod []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, pod, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	goldenFile(t, name+".json", buf.Bytes())
}

// goldenFile compares got with testdata/golden/FILE (-update rewrites it).
func goldenFile(t *testing.T, file string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", file)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (go test -update rewrites it):\n%s", p, got)
	}
}

func TestWebhookHTTP(t *testing.T) {
	notReady := true
	h := NewHandler(testMutator(t), quietLog(), func() error {
		if notReady {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	cases := []struct {
		name, method, path string
		body               string
		code               int
	}{
		{"health", http.MethodGet, PathHealth, "", http.StatusOK},
		{"not ready", http.MethodGet, PathReady, "", http.StatusServiceUnavailable},
		{"garbage", http.MethodPost, PathPod, "{not json", http.StatusBadRequest},
		{"not a review", http.MethodPost, PathPod, `{"apiVersion":"v1","kind":"Pod"}`, http.StatusBadRequest},
		{"no request", http.MethodPost, PathPod, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"no uid", http.MethodPost, PathPod, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, http.StatusBadRequest},
		{"wrong method", http.MethodGet, PathPod, "", http.StatusMethodNotAllowed},
		{"unknown path", http.MethodPost, "/validate", "{}", http.StatusNotFound},
		{"too large", http.MethodPost, PathPod, strings.Repeat(" ", maxReview+1), http.StatusRequestEntityTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)))
			if rec.Code != c.code {
				t.Errorf("%s %s: %d %s, want %d", c.method, c.path, rec.Code, rec.Body, c.code)
			}
		})
	}
	notReady = false
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathReady, nil))
	if rec.Code != http.StatusOK {
		t.Errorf("ready: %d", rec.Code)
	}
}

// A pod that is already injected, sent again (the apiserver's reinvocation, or a
// pod recreated from an injected spec), is never injected twice.
func TestNeverTwice(t *testing.T) {
	m := testMutator(t)
	var rv struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(fixture(t, "regular-container"), &rv); err != nil {
		t.Fatal(err)
	}
	pod := []byte(rv.Request.Object)
	for round := range 2 {
		res := m.Mutate(pod, PodOptIn)
		if round == 1 {
			if res.Patch != nil {
				t.Fatalf("injected twice: %v", res.Patch)
			}
			return
		}
		b, _ := json.Marshal(res.Patch)
		p, err := jsonpatch.DecodePatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if pod, err = p.Apply(pod); err != nil {
			t.Fatal(err)
		}
	}
}
