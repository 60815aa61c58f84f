package inject

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/releaseutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/camproxy/camproxy/config"
)

// The Prometheus Operator and cert-manager kinds are CRDs: they decode into these
// local structs, which hold every field the manifests may use.
type (
	monitorEndpoint struct {
		Port     string `json:"port"`
		Path     string `json:"path"`
		Interval string `json:"interval"`
	}
	monitorNamespaces struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	}
	serviceMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector *monitorNamespaces   `json:"namespaceSelector,omitempty"`
			Endpoints         []monitorEndpoint    `json:"endpoints"`
		} `json:"spec"`
	}
	podMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector            metav1.LabelSelector `json:"selector"`
			NamespaceSelector   *monitorNamespaces   `json:"namespaceSelector,omitempty"`
			PodMetricsEndpoints []monitorEndpoint    `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	certificate struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			SecretName string   `json:"secretName"`
			DNSNames   []string `json:"dnsNames"`
			IssuerRef  struct {
				Name string `json:"name"`
				Kind string `json:"kind"`
			} `json:"issuerRef"`
			Duration    string `json:"duration"`
			RenewBefore string `json:"renewBefore"`
			PrivateKey  struct {
				Algorithm      string `json:"algorithm"`
				Size           int    `json:"size"`
				RotationPolicy string `json:"rotationPolicy"`
			} `json:"privateKey"`
		} `json:"spec"`
	}
	issuer struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			SelfSigned *struct{} `json:"selfSigned"`
		} `json:"spec"`
	}
)

// kinds is every kind the manifests may hold, with its Go type; anything else fails.
var kinds = map[string]func() any{
	"v1/Namespace":                             func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"autoscaling/v2/HorizontalPodAutoscaler":   func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/ClusterRole": func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": func() any {
		return &admissionregistrationv1.MutatingWebhookConfiguration{}
	},
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &serviceMonitor{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &podMonitor{} },
	"cert-manager.io/v1/Certificate":          func() any { return &certificate{} },
	"cert-manager.io/v1/Issuer":               func() any { return &issuer{} },
}

var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}

// rendered is one install's manifests, every object strict-decoded.
type rendered struct {
	objs map[string]any // "Kind namespace/name" → typed object
}

func key(kind, ns, name string) string { return kind + " " + ns + "/" + name }

// chartDir is the Helm chart, the one install of camproxy on Kubernetes.
var chartDir = filepath.Join("..", "deploy", "helm", "camproxy")

// install is one `helm install --dry-run` of the chart: its release, namespace,
// values files (relative to the chart) and --set values.
type install struct {
	release, namespace string
	files              []string
	set                []string
}

// renderChart runs the install with Helm's own library, client-only, as `helm
// install --dry-run` (or `helm template`) does: the chart's kubeVersion, the
// values schema and every template are checked.
func renderChart(t *testing.T, in install) (*rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	var files []string
	for _, f := range in.files {
		files = append(files, filepath.Join(chartDir, f))
	}
	vals, err := (&values.Options{ValueFiles: files, Values: in.set}).MergeValues(getter.Providers{})
	if err != nil {
		t.Fatalf("values %v %v: %v", in.files, in.set, err)
	}
	cfg := &action.Configuration{Log: t.Logf}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = in.release, in.namespace
	// The oldest Kubernetes with native sidecars, which the chart's kubeVersion asks for.
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.29.0", Major: "1", Minor: "29"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	if len(rel.Hooks) != 0 {
		t.Errorf("%d hooks: the chart has none", len(rel.Hooks))
	}
	r := &rendered{objs: map[string]any{}}
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		var head struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // a template that rendered nothing but comments
		}
		gvk := head.APIVersion + "/" + head.Kind
		newObj, ok := kinds[gvk]
		if !ok {
			t.Errorf("%s %s: a kind this test does not know", gvk, head.Name)
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s %s does not strict-decode into %T: %v\n%s", gvk, head.Name, obj, err, doc)
			continue
		}
		if slices.Contains(clusterScoped, head.Kind) != (head.Namespace == "") {
			t.Errorf("%s %s: namespace %q", head.Kind, head.Name, head.Namespace)
		}
		k := key(head.Kind, head.Namespace, head.Name)
		if _, dup := r.objs[k]; dup {
			t.Errorf("%s rendered twice", k)
		}
		r.objs[k] = obj
		if head.Labels["app.kubernetes.io/instance"] != in.release || head.Labels["app.kubernetes.io/part-of"] != "camproxy" {
			t.Errorf("%s: labels %v do not name the release", k, head.Labels)
		}
	}
	return r, nil
}

func render(t *testing.T, in install) *rendered {
	t.Helper()
	r, err := renderChart(t, in)
	if err != nil {
		t.Fatalf("helm install --dry-run %+v: %v", in, err)
	}
	return r
}

func get[T any](t *testing.T, r *rendered, kind, ns, name string) *T {
	t.Helper()
	o, ok := r.objs[key(kind, ns, name)].(*T)
	if !ok {
		t.Fatalf("no %s %s/%s rendered", kind, ns, name)
	}
	return o
}

func all[T any](r *rendered) []*T {
	var out []*T
	for _, k := range slices.Sorted(mapKeys(r.objs)) {
		if o, ok := r.objs[k].(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// workload is a Deployment or StatefulSet: its namespace, name and pod template.
type workload struct {
	ns, name string
	replicas int32
	pod      *corev1.PodTemplateSpec
}

func workloads(r *rendered) []workload {
	var out []workload
	rep := func(p *int32) int32 {
		if p == nil {
			return 1
		}
		return *p
	}
	for _, d := range all[appsv1.Deployment](r) {
		out = append(out, workload{d.Namespace, d.Name, rep(d.Spec.Replicas), &d.Spec.Template})
	}
	for _, s := range all[appsv1.StatefulSet](r) {
		out = append(out, workload{s.Namespace, s.Name, rep(s.Spec.Replicas), &s.Spec.Template})
	}
	return out
}

func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %+v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// flagValue reads --name=value or --name value from args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// checkCommon holds for every rendering: references resolve, and camproxy's own
// containers are locked down and probed.
func checkCommon(t *testing.T, r *rendered) {
	ws := workloads(r)
	for _, s := range all[corev1.Service](r) {
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		var w *workload
		for i := range ws {
			if ws[i].ns == s.Namespace && selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, ws[i].pod.Labels) {
				w = &ws[i]
			}
		}
		if w == nil {
			t.Errorf("Service %s/%s selects no workload", s.Namespace, s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(w.pod.Spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
					return cp.Name == p.TargetPort.String() || strconv.Itoa(int(cp.ContainerPort)) == p.TargetPort.String()
				})
			}) {
				t.Errorf("Service %s/%s port %s: no container port %s in %s", s.Namespace, s.Name, p.Name, p.TargetPort.String(), w.name)
			}
		}
	}
	for _, p := range all[policyv1.PodDisruptionBudget](r) {
		if !slices.ContainsFunc(ws, func(w workload) bool { return w.ns == p.Namespace && selects(t, p.Spec.Selector, w.pod.Labels) }) {
			t.Errorf("PodDisruptionBudget %s/%s selects no workload", p.Namespace, p.Name)
		}
	}
	for _, h := range all[autoscalingv2.HorizontalPodAutoscaler](r) {
		get[appsv1.Deployment](t, r, h.Spec.ScaleTargetRef.Kind, h.Namespace, h.Spec.ScaleTargetRef.Name)
	}
	for _, w := range ws {
		if !selects(t, &metav1.LabelSelector{MatchLabels: w.pod.Labels}, w.pod.Labels) {
			t.Errorf("%s/%s: pod template without labels", w.ns, w.name)
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.ConfigMap != nil {
				get[corev1.ConfigMap](t, r, "ConfigMap", w.ns, v.ConfigMap.Name)
			}
		}
		for _, c := range w.pod.Spec.Containers {
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s/%s container %s: no readiness or liveness probe", w.ns, w.name, c.Name)
			}
			if !strings.HasPrefix(c.Image, "ghcr.io/camproxy/camproxy:") {
				continue
			}
			ps, cs := w.pod.Spec.SecurityContext, c.SecurityContext
			if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != NonRootUID ||
				cs == nil || !*cs.ReadOnlyRootFilesystem || *cs.AllowPrivilegeEscalation ||
				!slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s/%s container %s is not locked down", w.ns, w.name, c.Name)
			}
		}
	}
}

// gatewayToken stands in for the admin token the gateway reads from its Secret.
const gatewayToken = "token-from-the-secret-0123456789"

// sidecarConfig parses the ConfigMap's config.yaml with the environment a sidecar of
// the given settings gets from the injector (nil settings: the gateway, whose only
// variable is the admin token from its Secret).
func sidecarConfig(t *testing.T, cm *corev1.ConfigMap, o Options, s *settings) *config.Config {
	t.Helper()
	env := map[string]string{"CAMPROXY_ADMIN_TOKEN": gatewayToken}
	if s != nil {
		env = map[string]string{}
		for _, e := range o.sidecarEnv(*s) {
			env[e.Name] = e.Value
		}
	}
	cfg, err := config.Parse([]byte(cm.Data[ConfigKey]), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("ConfigMap %s/%s %s: %v", cm.Namespace, cm.Name, ConfigKey, err)
	}
	return cfg
}

// serviceURL checks that u names a rendered Service (svc.ns.svc.cluster.local:port).
func serviceURL(t *testing.T, r *rendered, what, u string) *corev1.Service {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s %q: %v", what, u, err)
	}
	host, port, _ := net.SplitHostPort(p.Host)
	parts := strings.Split(host, ".")
	if len(parts) != 5 || strings.Join(parts[2:], ".") != "svc.cluster.local" {
		t.Fatalf("%s %q: want SERVICE.NAMESPACE.svc.cluster.local (sidecars live in other namespaces)", what, u)
	}
	s := get[corev1.Service](t, r, "Service", parts[1], parts[0])
	if !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return strconv.Itoa(int(sp.Port)) == port }) {
		t.Errorf("%s %q: Service %s has no port %s", what, u, s.Name, port)
	}
	return s
}

// names are a release's object names: the gateway's is the chart's fullname.
type objNames struct{ ns, gateway, injector, redis, cam string }

func releaseNames(ns, fullname string) objNames {
	return objNames{ns, fullname, fullname + "-injector", fullname + "-redis", fullname + "-cam"}
}

// checkCamproxy checks the chart's own contract: the injector and its webhook (when
// installed), the config every sidecar reads, the gateway, Redis and the CAM agree
// with each other.
func checkCamproxy(t *testing.T, r *rendered, n objNames) (injector *appsv1.Deployment, opts Options, gw *config.Config) {
	opts = DefaultOptions("ghcr.io/camproxy/camproxy:test")
	injector, _ = r.objs[key("Deployment", n.ns, n.injector)].(*appsv1.Deployment)
	if injector != nil {
		opts = checkInjector(t, r, n, injector)
	}

	// The config: valid for the gateway and for sidecars, pinned or not; the arms the
	// injector can pin are the config's; every host is a rendered Service.
	cm := get[corev1.ConfigMap](t, r, "ConfigMap", n.ns, n.gateway)
	if injector != nil && opts.ConfigMap != cm.Name {
		t.Errorf("--config-map %q, the ConfigMap is %q", opts.ConfigMap, cm.Name)
	}
	gw = sidecarConfig(t, cm, opts, nil)
	// With an experiments list a sidecar reads the list: there is no one experiment
	// whose arm camproxy.io/arm could pin, so the injector is told no arms.
	var cfgArms []string
	if len(gw.Experiments) == 0 {
		for _, a := range gw.Experiment.Arms {
			cfgArms = append(cfgArms, a.Name)
		}
	}
	if injector != nil && !slices.Equal(cfgArms, opts.Arms) {
		t.Errorf("--arms %v, the config's arms %v", opts.Arms, cfgArms)
	}
	if gw.Server.Listen != "0.0.0.0:8080" || gw.Server.AdminListen != "0.0.0.0:9090" || gw.Admin.Token != gatewayToken || gw.Admin.LoopbackOnly {
		t.Errorf("gateway listens on %s / %s, admin %+v: want every interface, the API behind the token", gw.Server.Listen, gw.Server.AdminListen, gw.Admin)
	}
	// Without its Secret the gateway refuses to start rather than open its admin API.
	if _, err := config.Parse([]byte(cm.Data[ConfigKey]), func(string) (string, bool) { return "", false }); err == nil ||
		!strings.Contains(err.Error(), "admin.token") {
		t.Errorf("the gateway's config without CAMPROXY_ADMIN_TOKEN: %v, want refused", err)
	}
	if gw.Cache.RedisURL == "" || gw.Episodes.Store != config.StoreRedis || len(gw.Replay.Sinks) != 1 || strings.HasPrefix(gw.Replay.Sinks[0], "file:") {
		t.Errorf("the fleet must share Redis and one replay sink: cache %q episodes %q sinks %v", gw.Cache.RedisURL, gw.Episodes.Store, gw.Replay.Sinks)
	}
	hosts := map[string]string{}
	if _, ok := r.objs[key("StatefulSet", n.ns, n.redis)]; ok {
		hosts["cache.redis_url"], hosts["replay.sinks[0]"] = gw.Cache.RedisURL, gw.Replay.Sinks[0]
	}
	if cam, ok := gw.Augmenters["cam"]; ok {
		hosts["augmenters.cam.base_url"] = cam.BaseURL
	}
	for what, u := range hosts {
		serviceURL(t, r, what, u)
	}
	if strings.HasPrefix(gw.Replay.SpoolDir, "/") {
		t.Errorf("replay.spool_dir %q: keep it relative, under the working dir (the emptyDir)", gw.Replay.SpoolDir)
	}
	// A file an augmenter reads is in the ConfigMap, which the gateway and every
	// sidecar mount at ConfigDir.
	for name, a := range gw.Augmenters {
		for _, f := range []string{a.File, a.GuidanceFile} {
			if f == "" {
				continue
			}
			if dir, base := filepath.Split(f); filepath.Clean(dir) != ConfigDir || cm.Data[base] == "" {
				t.Errorf("augmenters.%s reads %s: not a key of the ConfigMap %s mounted at %s", name, f, cm.Name, ConfigDir)
			}
		}
	}
	if injector != nil {
		// A sidecar of a pod with no camproxy.io/* settings runs the gateway's
		// experiments on its own loopback.
		s, err := opts.readSettings(nil)
		if err != nil {
			t.Fatal(err)
		}
		sc := sidecarConfig(t, cm, opts, &s)
		if sc.Server.Listen != "127.0.0.1:8080" || !slices.Equal(sc.ExperimentNames(), gw.ExperimentNames()) {
			t.Errorf("unpinned sidecar: listen %s experiments %v, the gateway's %v", sc.Server.Listen, sc.ExperimentNames(), gw.ExperimentNames())
		}
	}
	for _, arm := range opts.Arms {
		s, err := opts.readSettings(map[string]string{AnnotationArm: arm, AnnotationExperiment: "pinned-" + arm})
		if err != nil {
			t.Fatal(err)
		}
		sc := sidecarConfig(t, cm, opts, &s)
		if !sc.Admin.LoopbackOnly || sc.Admin.Token != "" {
			t.Errorf("sidecar pinned to %s: admin %+v, want its API for the pod's own containers only", arm, sc.Admin)
		}
		if sc.Server.Listen != "127.0.0.1:8080" || sc.Server.AdminListen != ":9090" || sc.Experiment.Name != "pinned-"+arm || sc.Experiment.Adaptive.Enabled {
			t.Errorf("sidecar pinned to %s: listen %s admin %s experiment %s adaptive %v", arm, sc.Server.Listen,
				sc.Server.AdminListen, sc.Experiment.Name, sc.Experiment.Adaptive.Enabled)
		}
		for _, a := range sc.Experiment.Arms {
			if want := map[bool]float64{true: 1, false: 0}[a.Name == arm]; a.Weight != want {
				t.Errorf("sidecar pinned to %s: arm %s weight %v, want %v", arm, a.Name, a.Weight, want)
			}
		}
	}

	// The gateway runs that config as the sidecar does, with its token from a Secret.
	gwd := get[appsv1.Deployment](t, r, "Deployment", n.ns, n.gateway)
	gc := gwd.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(gc.Env, func(e corev1.EnvVar) bool { return e.Name == "CAMPROXY_ADMIN_TOKEN" })
	if i < 0 || gc.Env[i].ValueFrom == nil || gc.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Fatalf("the gateway's CAMPROXY_ADMIN_TOKEN does not come from a Secret: %+v", gc.Env)
	}
	if ref := gc.Env[i].ValueFrom.SecretKeyRef; ref.Optional != nil && *ref.Optional {
		t.Error("the admin token's Secret is optional: a gateway without it does not start")
	} else if s, ok := r.objs[key("Secret", n.ns, ref.Name)].(*corev1.Secret); ok && len(s.Data[ref.Key]) < 32 {
		t.Errorf("Secret %s key %s: %d bytes, want a token of 32 or more", ref.Name, ref.Key, len(s.Data[ref.Key]))
	}
	if !slices.Equal(gc.Args, []string{"serve", "--config", ConfigDir + "/" + ConfigKey}) || gc.WorkingDir != DataDir {
		t.Errorf("gateway args %v workingDir %s", gc.Args, gc.WorkingDir)
	}
	if gc.ReadinessProbe.HTTPGet.Path != "/readyz" || gc.LivenessProbe.HTTPGet.Path != "/healthz" || gc.ReadinessProbe.HTTPGet.Port.String() != "admin" {
		t.Errorf("gateway probes")
	}
	if s := gwd.Spec.Template.Spec.TerminationGracePeriodSeconds; s == nil || int(*s) <= int(gw.Server.ShutdownGrace.Seconds()) {
		t.Errorf("gateway terminationGracePeriodSeconds %v: not longer than server.shutdown_grace %s", s, gw.Server.ShutdownGrace)
	}

	// The CAM, when the config has one on the cluster, serves the model it asks
	// for, on GPUs, with /health probes.
	if _, ok := gw.Augmenters["cam"]; !ok {
		return injector, opts, gw
	}
	cam := get[appsv1.Deployment](t, r, "Deployment", n.ns, n.cam)
	vc := cam.Spec.Template.Spec.Containers[0]
	if v, _ := flagValue(vc.Args, "served-model-name"); v != gw.Augmenters["cam"].Model || !slices.Equal(vc.Command, []string{"vllm", "serve"}) {
		t.Errorf("vLLM %v %v: does not serve the model %q", vc.Command, vc.Args, gw.Augmenters["cam"].Model)
	}
	gpu := vc.Resources.Limits["nvidia.com/gpu"]
	if tp, _ := flagValue(vc.Args, "tensor-parallel-size"); gpu.Value() < 1 || tp != strconv.FormatInt(gpu.Value(), 10) {
		t.Errorf("the CAM has %d GPUs and --tensor-parallel-size=%s", gpu.Value(), tp)
	}
	for _, p := range []*corev1.Probe{vc.StartupProbe, vc.ReadinessProbe, vc.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
			t.Errorf("vLLM probe %+v: want GET /health", p)
		}
	}
	return injector, opts, gw
}

// checkInjector checks the injector and its webhook, and returns the options it runs
// with (its flags: --self-label, --config-map, --arms).
func checkInjector(t *testing.T, r *rendered, n objNames, injector *appsv1.Deployment) (opts Options) {
	t.Helper()
	pod := injector.Spec.Template
	c := pod.Spec.Containers[0]
	if c.Args[0] != "inject" || c.Args[1] != "serve" {
		t.Fatalf("injector args %v", c.Args)
	}
	opts = DefaultOptions("ghcr.io/camproxy/camproxy:test")
	if v, ok := flagValue(c.Args, "self-label"); ok {
		opts.SelfLabel = v
	}
	if v, ok := flagValue(c.Args, "config-map"); ok {
		opts.ConfigMap = v
	}
	selfKey, selfValue, _ := strings.Cut(opts.SelfLabel, "=")
	if pod.Labels[selfKey] != selfValue {
		t.Errorf("the injector's pods lack its self label %s: it could inject itself", opts.SelfLabel)
	}
	if img, _ := flagValue(c.Args, "image"); img != c.Image {
		t.Errorf("sidecars run %q, the injector %q: the chart's camproxy is one version", img, c.Image)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Error("the injector does not know its namespace (POD_NAMESPACE)")
	}

	// The webhook configuration calls this injector, on the paths it serves.
	mwc := get[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", "", n.injector)
	listen, _ := flagValue(c.Args, "listen")
	_, listenPort, _ := net.SplitHostPort(listen)
	paths := map[string]bool{}
	for _, w := range mwc.Webhooks {
		if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("webhook %s: failurePolicy %s, sideEffects %s", w.Name, *w.FailurePolicy, *w.SideEffects)
		}
		if !slices.Contains(w.AdmissionReviewVersions, "v1") || w.TimeoutSeconds == nil || *w.TimeoutSeconds > 10 {
			t.Errorf("webhook %s: versions %v timeout %v", w.Name, w.AdmissionReviewVersions, w.TimeoutSeconds)
		}
		ref := w.ClientConfig.Service
		svc := get[corev1.Service](t, r, "Service", ref.Namespace, ref.Name)
		if ref.Namespace != injector.Namespace || !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pod.Labels) {
			t.Errorf("webhook %s calls Service %s/%s, which is not the injector's", w.Name, ref.Namespace, ref.Name)
		}
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port })
		if i < 0 {
			t.Fatalf("webhook %s: Service %s has no port %d", w.Name, svc.Name, *ref.Port)
		}
		cp := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == svc.Spec.Ports[i].TargetPort.String() })
		if cp < 0 || strconv.Itoa(int(c.Ports[cp].ContainerPort)) != listenPort {
			t.Errorf("webhook %s: Service port %d does not reach --listen %s", w.Name, *ref.Port, listen)
		}
		if *ref.Path != PathPod && *ref.Path != PathNamespace {
			t.Errorf("webhook %s: path %s is not served", w.Name, *ref.Path)
		}
		for _, seg := range strings.Split(strings.TrimPrefix(*ref.Path, "/"), "/") {
			if msgs := validation.IsDNS1123Subdomain(seg); len(msgs) > 0 {
				t.Errorf("webhook %s: path %s: the apiserver refuses segment %q: %v", w.Name, *ref.Path, seg, msgs)
			}
		}
		paths[*ref.Path] = true
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
			!slices.Equal(w.Rules[0].Resources, []string{"pods"}) || !slices.Equal(w.Rules[0].APIGroups, []string{""}) {
			t.Errorf("webhook %s: rules %+v, want pods CREATE", w.Name, w.Rules)
		}
	}
	if len(paths) != 2 {
		t.Errorf("webhook paths %v: want both %s and %s", paths, PathPod, PathNamespace)
	}
	// Which webhook sees a pod of which namespace: at most one, never the system's
	// or the injector's own pods.
	for _, nc := range []struct {
		labels map[string]string
		path   string // "" = no webhook
	}{
		{map[string]string{"kubernetes.io/metadata.name": "agents", LabelNamespace: NamespaceEnabled}, PathNamespace},
		{map[string]string{"kubernetes.io/metadata.name": "default"}, PathPod},
		{map[string]string{"kubernetes.io/metadata.name": "research", LabelNamespace: "disabled"}, PathPod},
		{map[string]string{"kubernetes.io/metadata.name": "kube-system"}, ""},
		{map[string]string{"kubernetes.io/metadata.name": injector.Namespace}, ""},
		{map[string]string{"kubernetes.io/metadata.name": injector.Namespace, LabelNamespace: NamespaceEnabled}, ""},
	} {
		var got []string
		for _, w := range mwc.Webhooks {
			if selects(t, w.NamespaceSelector, nc.labels) && selects(t, w.ObjectSelector, map[string]string{"app": "agent"}) {
				got = append(got, *w.ClientConfig.Service.Path)
			}
			if selects(t, w.ObjectSelector, pod.Labels) {
				t.Errorf("webhook %s would be called for the injector's own pods", w.Name)
			}
		}
		if want := []string{nc.path}; (nc.path == "" && len(got) != 0) || (nc.path != "" && !slices.Equal(got, want)) {
			t.Errorf("namespace %v: webhooks %v, want %q", nc.labels, got, nc.path)
		}
	}

	// TLS: the injector serves the pair of a mounted Secret and touches no API, so
	// it has no token and no RBAC.
	certFile, ok1 := flagValue(c.Args, "tls-cert")
	keyFile, ok2 := flagValue(c.Args, "tls-key")
	if !ok1 || !ok2 {
		t.Fatalf("injector args %v: no mounted pair", c.Args)
	}
	vol := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Name != "" })
	if vol < 0 {
		t.Fatal("the injector mounts no Secret")
	}
	m := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == pod.Spec.Volumes[vol].Name })
	if m < 0 || filepath.Join(c.VolumeMounts[m].MountPath, "tls.crt") != certFile || filepath.Join(c.VolumeMounts[m].MountPath, "tls.key") != keyFile {
		t.Errorf("--tls-cert %s --tls-key %s are not in the Secret's mount", certFile, keyFile)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the injector's pods get an API token they do not need")
	}
	get[corev1.ServiceAccount](t, r, "ServiceAccount", injector.Namespace, pod.Spec.ServiceAccountName)
	if n := len(all[rbacv1.ClusterRole](r)) + len(all[rbacv1.ClusterRoleBinding](r)); n != 0 {
		t.Errorf("%d RBAC objects: the injector with a mounted pair needs none", n)
	}
	tlsSecret := pod.Spec.Volumes[vol].Secret.SecretName
	if len(all[certificate](r)) == 0 {
		checkChartTLS(t, r, mwc, get[corev1.Secret](t, r, "Secret", n.ns, tlsSecret))
	}
	if arms, _ := flagValue(c.Args, "arms"); arms != "" {
		opts.Arms = strings.Split(arms, ",")
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	return opts
}

// checkChartTLS: the pair the chart made serves the name the apiserver calls and
// chains to the caBundle of every webhook.
func checkChartTLS(t *testing.T, r *rendered, mwc *admissionregistrationv1.MutatingWebhookConfiguration, s *corev1.Secret) {
	t.Helper()
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s: type %s", s.Name, s.Type)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("Secret %s: %v", s.Name, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	// The key cert-manager would make (privateKey ECDSA 256), not RSA: cheap to make
	// on every install.
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() || leaf.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("Secret %s: a %v key signed %v, want ECDSA P-256 signed by an ECDSA CA", s.Name, leaf.PublicKeyAlgorithm, leaf.SignatureAlgorithm)
	}
	for _, w := range mwc.Webhooks {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			t.Errorf("webhook %s: no caBundle", w.Name)
			continue
		}
		ref := w.ClientConfig.Service
		name := ref.Name + "." + ref.Namespace + ".svc"
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("webhook %s: the apiserver calling %s would refuse the injector's certificate: %v", w.Name, name, err)
		}
	}
}

// gpus is every GPU the install asks for.
func gpus(r *rendered) int64 {
	var total int64
	for _, w := range workloads(r) {
		for _, c := range w.pod.Spec.Containers {
			q := c.Resources.Limits["nvidia.com/gpu"]
			total += int64(w.replicas) * q.Value()
		}
	}
	return total
}

func TestChartDefault(t *testing.T) {
	r := render(t, install{release: "camproxy", namespace: "camproxy"})
	checkCommon(t, r)
	_, _, gw := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	get[appsv1.StatefulSet](t, r, "StatefulSet", "camproxy", "camproxy-redis")
	get[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", "camproxy", "camproxy")
	get[autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler", "camproxy", "camproxy")
	if _, ok := gw.Augmenters["cam"]; !ok || gpus(r) != 1 {
		t.Errorf("the default install has the CAM on %d GPUs, want one", gpus(r))
	}
	// Scraping needs the Prometheus Operator's CRDs: only when asked.
	if n := len(all[serviceMonitor](r)) + len(all[podMonitor](r)); n != 0 {
		t.Errorf("%d monitors by default", n)
	}
	if n := len(all[corev1.Namespace](r)); n != 0 {
		t.Errorf("%d namespaces by default", n)
	}
}

// TestChartGPUFree: values-gpu-free.yaml is the small install: no GPU anywhere, a
// playbook arm whose file every sidecar finds.
func TestChartGPUFree(t *testing.T) {
	r := render(t, install{release: "camproxy", namespace: "camproxy", files: []string{"values-gpu-free.yaml"}})
	checkCommon(t, r)
	_, opts, gw := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	if n := gpus(r); n != 0 {
		t.Errorf("the GPU-free install asks for %d GPUs", n)
	}
	if _, ok := r.objs[key("Deployment", "camproxy", "camproxy-cam")]; ok {
		t.Error("the GPU-free install deploys the CAM")
	}
	var augmenters []string
	for _, a := range gw.Experiment.Arms {
		if a.Augmenter != "none" {
			augmenters = append(augmenters, gw.Augmenters[a.Augmenter].Type)
		}
	}
	if !slices.Equal(augmenters, []string{config.AugmenterPlaybook}) || !slices.Equal(opts.Arms, []string{"baseline", "playbook"}) {
		t.Errorf("arms %v use %v: want baseline and one playbook arm", opts.Arms, augmenters)
	}
	if pb := gw.Augmenters["playbook"]; pb.File == "" {
		t.Error("the playbook augmenter reads no file")
	}
}

// TestChartConfigGolden: the config.yaml that values with one experiment render —
// what every sidecar reads, with the variables the injector sets — stays as it was
// (testdata/golden/chart-*.config.yaml); a change to it is made on purpose, with
// go test -update.
func TestChartConfigGolden(t *testing.T) {
	for _, tc := range []struct{ golden, values string }{
		{"chart-default.config.yaml", ""},
		{"chart-gpu-free.config.yaml", "values-gpu-free.yaml"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			in := install{release: "camproxy", namespace: "camproxy"}
			if tc.values != "" {
				in.files = []string{tc.values}
			}
			r := render(t, in)
			cm := get[corev1.ConfigMap](t, r, "ConfigMap", "camproxy", "camproxy")
			goldenFile(t, tc.golden, []byte(cm.Data[ConfigKey]))
		})
	}
}

func TestChartPaper(t *testing.T) {
	r := render(t, install{release: "camproxy", namespace: "camproxy", files: []string{"values-paper.yaml"}})
	checkCommon(t, r)
	_, opts, _ := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	if n := gpus(r); n != 8 {
		t.Errorf("the CAM has %d GPUs, the paper 8", n)
	}
	if h := get[autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler", "camproxy", "camproxy"); h.Spec.MaxReplicas != 50 {
		t.Errorf("HPA maxReplicas %d", h.Spec.MaxReplicas)
	}
	ns := get[corev1.Namespace](t, r, "Namespace", "", "agents")
	if ns.Labels[LabelNamespace] != NamespaceEnabled {
		t.Errorf("namespace agents labels %v: not opted in", ns.Labels)
	}
	agentsCM := get[corev1.ConfigMap](t, r, "ConfigMap", "agents", opts.ConfigMap)
	if gw := get[corev1.ConfigMap](t, r, "ConfigMap", "camproxy", "camproxy"); agentsCM.Data[ConfigKey] != gw.Data[ConfigKey] {
		t.Error("the sidecars' config differs from the gateway's")
	}
	sm := get[serviceMonitor](t, r, "ServiceMonitor", "camproxy", "camproxy")
	svc := get[corev1.Service](t, r, "Service", "camproxy", "camproxy")
	if !selects(t, &sm.Spec.Selector, svc.Labels) || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sm.Spec.Endpoints[0].Port }) {
		t.Errorf("ServiceMonitor %+v does not scrape the gateway Service's admin port", sm.Spec)
	}
	for _, s := range all[corev1.Service](r) {
		if s.Name != svc.Name && selects(t, &sm.Spec.Selector, s.Labels) {
			t.Errorf("ServiceMonitor also scrapes Service %s", s.Name)
		}
	}
	pm := get[podMonitor](t, r, "PodMonitor", "camproxy", "camproxy-sidecars")
	side := opts.sidecar(settings{native: true, configMap: "camproxy", port: DefaultPort, adminPort: DefaultAdminPort})
	if pm.Spec.PodMetricsEndpoints[0].Port != side.Ports[1].Name || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" || !pm.Spec.NamespaceSelector.Any {
		t.Errorf("PodMonitor %+v does not scrape the sidecars' %s port in every namespace", pm.Spec, side.Ports[1].Name)
	}
}

// TestChartGatewayExperiments: values-gateway-experiments.yaml is a gateway for
// three agents: config.experiments renders as camproxy's experiments list (and
// experiment not at all, which camproxy would refuse beside it), which camproxy
// loads with each experiment's match, arms and settings as the values give them,
// and a learner store of its own in the fleet's Redis.
func TestChartGatewayExperiments(t *testing.T) {
	const values = "values-gateway-experiments.yaml"
	r := render(t, install{release: "camproxy", namespace: "camproxy", files: []string{values}})
	checkCommon(t, r)
	_, _, gw := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	if n := len(all[admissionregistrationv1.MutatingWebhookConfiguration](r)); n != 0 {
		t.Errorf("the gateway install has %d webhooks: its agents call it over the network", n)
	}
	checkGatewayExperiments(t, gw)

	// docs/gateway.md shows these experiments: its first YAML block is the file's.
	doc, err := os.ReadFile(filepath.Join("..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	file, err := os.ReadFile(filepath.Join(chartDir, values))
	if err != nil {
		t.Fatal(err)
	}
	var shown, given struct {
		Config struct {
			Experiments []map[string]any `json:"experiments"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal([]byte(block), &shown); err != nil {
		t.Fatalf("docs/gateway.md: %v", err)
	}
	if err := yaml.Unmarshal(file, &given); err != nil {
		t.Fatal(err)
	}
	if len(given.Config.Experiments) == 0 || !reflect.DeepEqual(shown.Config.Experiments, given.Config.Experiments) {
		t.Errorf("docs/gateway.md shows experiments %v, %s has %v", shown.Config.Experiments, values, given.Config.Experiments)
	}

	// With the injector too, a sidecar reads the same list: the sidecars' variables do
	// not move it, and camproxy.io/arm, with no one experiment's arm to pin, is refused
	// (the pod starts without camproxy and kubectl prints why).
	r = render(t, install{release: "camproxy", namespace: "camproxy", files: []string{values}, set: []string{"injector.enabled=true"}})
	checkCommon(t, r)
	_, opts, gw := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	checkGatewayExperiments(t, gw)
	s, err := opts.readSettings(map[string]string{AnnotationExperiment: "pinned"})
	if err != nil {
		t.Fatal(err)
	}
	s.arm = "cam" // as a pinning injector would set it
	opts.Arms = []string{"baseline", "cam"}
	sc := sidecarConfig(t, get[corev1.ConfigMap](t, r, "ConfigMap", "camproxy", "camproxy"), opts, &s)
	checkGatewayExperiments(t, sc)
	if _, err := (Options{}).readSettings(map[string]string{AnnotationArm: "cam"}); err == nil || !strings.Contains(err.Error(), "knows no arms") {
		t.Errorf("camproxy.io/arm with the experiments list: %v, want refused", err)
	}
}

// checkGatewayExperiments: cfg holds values-gateway-experiments.yaml's experiments.
func checkGatewayExperiments(t *testing.T, cfg *config.Config) {
	t.Helper()
	if got := cfg.ExperimentNames(); !slices.Equal(got, []string{"support", "research", "coding", "default"}) {
		t.Fatalf("experiments %v", got)
	}
	views := cfg.PerExperiment()
	support, research, coding, def := views[0].Experiment, views[1].Experiment, views[2].Experiment, views[3].Experiment
	for _, c := range []struct {
		name      string
		got, want config.Match
	}{
		{"support", support.Match, config.Match{Agents: []string{"support-bot"}}},
		{"research", research.Match, config.Match{KeyFingerprints: []string{"3f9a1c2e"}}},
		{"coding", coding.Match, config.Match{Models: []string{"claude-*", "gpt-5*"}, Protocols: []string{"anthropic", "responses"}}},
		{"default", def.Match, config.Match{}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s match %+v, want %+v", c.name, c.got, c.want)
		}
	}
	for _, v := range views {
		var arms []string
		for _, a := range v.Experiment.Arms {
			if a.Weight != 1 {
				t.Errorf("%s arm %s weight %v", v.Experiment.Name, a.Name, a.Weight)
			}
			arms = append(arms, a.Name+":"+a.Augmenter)
		}
		want := []string{"baseline:none", "cam:cam"}
		if v.Experiment.Name == config.DefaultExperimentName {
			want = want[:1]
		}
		if !slices.Equal(arms, want) {
			t.Errorf("%s arms %v, want %v", v.Experiment.Name, arms, want)
		}
	}
	if !support.Adaptive.Enabled || research.Adaptive.Enabled || !research.AllowOverride || support.AllowOverride || coding.AllowOverride {
		t.Errorf("settings: support adaptive %v override %v, research adaptive %v override %v, coding override %v",
			support.Adaptive.Enabled, support.AllowOverride, research.Adaptive.Enabled, research.AllowOverride, coding.AllowOverride)
	}
	// Only coding learns, from its own store in the fleet's Redis, which holds its lease.
	const store = "redis://camproxy-redis.camproxy.svc.cluster.local:6379/0?prefix=camproxy:playbook:coding"
	if l := views[2].Learn; !l.Enabled || l.Store != store || l.Model == "" {
		t.Errorf("coding learn: enabled %v store %q model %q, want its own store %s", l.Enabled, l.Store, l.Model, store)
	}
	for _, v := range []*config.Config{views[0], views[1], views[3]} {
		if v.Learn.Enabled {
			t.Errorf("%s learns", v.Experiment.Name)
		}
	}
}

// TestChartRelease: another release name in another namespace renames every
// object, and every host in the config follows (checkCamproxy resolves them).
func TestChartRelease(t *testing.T) {
	r := render(t, install{release: "edge", namespace: "llm", set: []string{"agents.namespaces={team-a}"}})
	checkCommon(t, r)
	_, opts, _ := checkCamproxy(t, r, releaseNames("llm", "edge-camproxy"))
	get[corev1.ConfigMap](t, r, "ConfigMap", "team-a", opts.ConfigMap)
	if opts.SelfLabel != "app.kubernetes.io/name=edge-camproxy-injector" {
		t.Errorf("--self-label %s", opts.SelfLabel)
	}
}

func TestChartCertManager(t *testing.T) {
	r := render(t, install{release: "camproxy", namespace: "camproxy", set: []string{"injector.certManager.enabled=true"}})
	checkCommon(t, r)
	injector, _, _ := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	cert := get[certificate](t, r, "Certificate", "camproxy", "camproxy-injector")
	get[issuer](t, r, cert.Spec.IssuerRef.Kind, "camproxy", cert.Spec.IssuerRef.Name)
	mwc := get[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", "", "camproxy-injector")
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != cert.Namespace+"/"+cert.Name {
		t.Errorf("inject-ca-from %q, the Certificate is %s/%s", got, cert.Namespace, cert.Name)
	}
	for _, w := range mwc.Webhooks {
		ref := w.ClientConfig.Service
		if !slices.Contains(cert.Spec.DNSNames, ref.Name+"."+ref.Namespace+".svc") {
			t.Errorf("Certificate dnsNames %v: not the name the apiserver calls, %s.%s.svc", cert.Spec.DNSNames, ref.Name, ref.Namespace)
		}
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("webhook %s: a caBundle beside cert-manager's", w.Name)
		}
	}
	if !slices.ContainsFunc(injector.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName
	}) {
		t.Errorf("the injector does not mount the Secret %s", cert.Spec.SecretName)
	}
	if _, ok := r.objs[key("Secret", "camproxy", cert.Spec.SecretName)]; ok {
		t.Error("the chart writes the Secret cert-manager owns")
	}
}

func TestChartExternalRedis(t *testing.T) {
	const url = "rediss://:secret@redis.example.internal:6380/2"
	r := render(t, install{release: "camproxy", namespace: "camproxy", set: []string{"redis.enabled=false", "redis.external.url=" + url}})
	checkCommon(t, r)
	_, _, gw := checkCamproxy(t, r, releaseNames("camproxy", "camproxy"))
	if len(all[appsv1.StatefulSet](r)) != 0 {
		t.Error("the in-cluster Redis is still deployed")
	}
	if gw.Cache.RedisURL != url || gw.Replay.Sinks[0] != url+"?stream=camproxy:replay" {
		t.Errorf("cache %q sinks %v: want the managed Redis", gw.Cache.RedisURL, gw.Replay.Sinks)
	}
}

// TestChartRefuses: values that would install a broken fleet fail with the key to fix.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"no redis", []string{"redis.enabled=false"}, "redis.external.url"},
		{"cam arm without cam", []string{"cam.enabled=false"}, "cam.enabled is false"},
		{"arm twice", []string{"config.experiment.arms[0].name=a", "config.experiment.arms[0].weight=1", "config.experiment.arms[0].augmenter=none",
			"config.experiment.arms[1].name=a", "config.experiment.arms[1].weight=1", "config.experiment.arms[1].augmenter=none"}, "names repeat"},
		{"arm without weight", []string{"config.experiment.arms[0].name=a", "config.experiment.arms[0].augmenter=none"}, "weight"},
		{"experiments: cam arm without cam", []string{"cam.enabled=false", "config.experiments[0].name=support",
			"config.experiments[0].arms[0].name=cam", "config.experiments[0].arms[0].weight=1", "config.experiments[0].arms[0].augmenter=cam"},
			`config.experiments[0].arms: arm "cam" uses the augmenter cam`},
		{"experiments: arm twice", []string{"config.experiments[0].name=default",
			"config.experiments[0].arms[0].name=a", "config.experiments[0].arms[0].weight=1", "config.experiments[0].arms[0].augmenter=none",
			"config.experiments[0].arms[1].name=a", "config.experiments[0].arms[1].weight=1", "config.experiments[0].arms[1].augmenter=none"},
			"config.experiments[0].arms: names repeat"},
		{"experiments: unnamed", []string{"config.experiments[0].match.agents={bot}"}, "missing property 'name'"},
		{"experiments: unknown key", []string{"config.experiments[0].name=a", "config.experiments[0].matches.agents={bot}"}, "'matches' not allowed"},
		{"experiments: unknown match key", []string{"config.experiments[0].name=a", "config.experiments[0].match.agent={bot}"}, "'agent' not allowed"},
		{"experiments: not a fingerprint", []string{"config.experiments[0].name=a", "config.experiments[0].match.key_fingerprints={sk-live-1234}"}, "key_fingerprints/0"},
		{"unknown value", []string{"gatway.replicas=1"}, "gatway"},
		{"unknown nested value", []string{"redis.externalURL=redis://x"}, "externalURL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, install{release: "camproxy", namespace: "camproxy", set: tc.set})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--set %v: %v, want an error naming %q", tc.set, err, tc.want)
			}
		})
	}
}

// TestDeployExampleAgent: the example agent Job decodes, and its pod, created in the
// paper install's agent namespace, comes out of the webhook with the sidecar and
// the base URLs.
func TestDeployExampleAgent(t *testing.T) {
	r := render(t, install{release: "camproxy", namespace: "camproxy", files: []string{"values-paper.yaml"}})
	ns := get[corev1.Namespace](t, r, "Namespace", "", "agents")
	b, err := os.ReadFile(filepath.Join("..", "deploy", "agents", "example-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatalf("example-job.yaml does not strict-decode into batch/v1 Job: %v", err)
	}
	pod := corev1.Pod{ObjectMeta: job.Spec.Template.ObjectMeta, Spec: job.Spec.Template.Spec}
	pod.APIVersion, pod.Kind, pod.Namespace, pod.GenerateName = "v1", "Pod", ns.Name, job.Name+"-"
	raw, _ := json.Marshal(pod)
	mode := PodOptIn
	if ns.Labels[LabelNamespace] == NamespaceEnabled {
		mode = NamespaceOptIn
	}
	res := testMutator(t).Mutate(raw, mode)
	if res.Patch == nil {
		t.Fatalf("not injected: %s", res.Reason)
	}
	pb, _ := json.Marshal(res.Patch)
	p, _ := jsonpatch.DecodePatch(pb)
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	got := strictPod(t, out)
	agent, _ := find(got.Spec.Containers, "agent")
	if envMap(agent)["OPENAI_BASE_URL"] != "http://127.0.0.1:8080/v1" {
		t.Errorf("agent env %v", envMap(agent))
	}
	side, ok := find(got.Spec.InitContainers, ContainerName)
	if !ok || side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the Job's sidecar is not native: the Job would never complete")
	}
	if envMap(side)[EnvExperiment] != job.Spec.Template.Annotations[AnnotationExperiment] {
		t.Errorf("sidecar env %v", envMap(side))
	}
	for _, v := range got.Spec.Volumes {
		if v.Name == ConfigVolume {
			get[corev1.ConfigMap](t, r, "ConfigMap", ns.Name, v.ConfigMap.Name) // the chart's agents.namespaces provides it
		}
	}
}
