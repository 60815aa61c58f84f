package inject

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

func TestParseReview(t *testing.T) {
	cases := []struct {
		name, body string
		err        string // "" = parses
		podCreate  bool
	}{
		{"v1 pod", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"kind":"Pod"}}}`, "", true},
		{"v1beta1 pod", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}}`, "", true},
		{"unknown fields are fine", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","future":1,"request":{"uid":"u","future":{},"kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{}}}`, "", true},
		{"pod status subresource", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"subResource":"status","operation":"CREATE","object":{}}}`, "", false},
		{"pod without object", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE"}}`, "", false},
		{"delete", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"DELETE","oldObject":{}}}`, "", false},
		{"a Pod of another group", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"example.com","kind":"Pod","version":"v1"},"operation":"CREATE","object":{}}}`, "", false},
		{"v2", `{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}}`, "apiVersion", false},
		{"not a review", `{"apiVersion":"v1","kind":"Pod"}`, "want AdmissionReview", false},
		{"case matters", `{"APIVERSION":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`, "apiVersion", false},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u"}}`, "no request", false},
		{"no uid", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`, "no uid", false},
		{"bad uid type", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, "admission.k8s.io/v1", false},
		{"not json", `AdmissionReview`, "not an AdmissionReview", false},
		{"empty", ``, "not an AdmissionReview", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := parseReview([]byte(c.body))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.isPodCreate() != c.podCreate {
				t.Errorf("isPodCreate %v", !c.podCreate)
			}
		})
	}
}

// FuzzParseReview: no input makes the parser, the mutator or the answer panic; every
// review that parses gets an answer in its own version with its uid; and every patch
// the mutator makes applies to the object and yields a pod with the sidecar.
func FuzzParseReview(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "review", "*.yaml"))
	for _, p := range files {
		f.Add(fixture(f, strings.TrimSuffix(filepath.Base(p), ".yaml")))
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{"metadata":null,"spec":{"containers":[{"name":"a","env":null}],"volumes":null}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{"metadata":{"annotations":{"camproxy.io/inject":"1"}},"spec":{"containers":[{"name":"a~b/c"}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":null}}`))
	m := testMutator(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseReview(body)
		if err != nil {
			return
		}
		for _, mode := range []Mode{PodOptIn, NamespaceOptIn} {
			res := Result{}
			if r.isPodCreate() {
				res = m.Mutate(r.object, mode)
			}
			out, err := r.respond(res)
			if err != nil {
				t.Fatalf("respond: %v", err)
			}
			var a answer
			if err := json.Unmarshal(out, &a); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			if a.APIVersion != r.apiVersion || a.Response == nil || a.Response.UID != r.uid || !a.Response.Allowed {
				t.Fatalf("answer %s to a %s request %s", out, r.apiVersion, r.uid)
			}
			if res.Patch == nil {
				continue
			}
			p, err := jsonpatch.DecodePatch(a.Response.Patch)
			if err != nil {
				t.Fatalf("patch does not decode: %v", err)
			}
			patched, err := p.Apply(r.object)
			if err != nil {
				t.Fatalf("patch does not apply: %v\nobject %s\npatch %s", err, r.object, a.Response.Patch)
			}
			var pod corev1.Pod
			if err := utiljson.Unmarshal(patched, &pod); err != nil {
				t.Fatalf("patched object is not a pod: %v\n%s", err, patched)
			}
			if pod.Annotations[AnnotationStatus] != StatusInjected ||
				!hasContainer(append(pod.Spec.InitContainers, pod.Spec.Containers...), ContainerName) {
				t.Fatalf("patched pod has no sidecar or status:\n%s", patched)
			}
			if m.Mutate(patched, mode).Patch != nil {
				t.Fatalf("injected twice:\n%s", patched)
			}
		}
	})
}
