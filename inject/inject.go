// Package inject is camproxy's Kubernetes sidecar injector: a mutating admission
// webhook that adds a camproxy container to the agent pods that opt in and points
// their base URLs at it, so an agent gets camproxy with one annotation and no change
// to its code.
//
// A pod opts in with the annotation camproxy.io/inject: "true" (webhook path
// /mutate), or by living in a namespace labelled camproxy.io/inject=enabled (path
// /mutate/namespace, where camproxy.io/inject: "false" opts a pod out). The webhook
// answers every AdmissionReview it can read with allowed: true; a pod it injects gets
// a JSON Patch, anything else (not opted in, already injected, host network, the
// injector's own pods, annotations it does not understand, objects that are not
// pods) gets no patch.
package inject

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod annotations (and the namespace label) the injector reads and writes.
const (
	// AnnotationInject opts a pod in ("true"), or out of its namespace's opt-in ("false").
	AnnotationInject = "camproxy.io/inject"
	// LabelNamespace on a namespace, with value NamespaceEnabled, opts in all its pods.
	LabelNamespace   = "camproxy.io/inject"
	NamespaceEnabled = "enabled"
	// AnnotationNativeSidecar "false" adds camproxy as a regular container instead of
	// a native sidecar (an init container with restartPolicy: Always).
	AnnotationNativeSidecar = "camproxy.io/native-sidecar"
	// AnnotationConfig names the ConfigMap (in the pod's namespace) holding the
	// sidecar's config.yaml; the default is Options.ConfigMap.
	AnnotationConfig = "camproxy.io/config"
	// AnnotationOverrideEnv "true" replaces base-URL variables a container already sets.
	AnnotationOverrideEnv = "camproxy.io/override-env"
	// AnnotationExperiment sets the sidecar's $CAMPROXY_EXPERIMENT (the experiment name).
	AnnotationExperiment = "camproxy.io/experiment"
	// AnnotationArm pins every episode of the pod to one arm of Options.Arms.
	AnnotationArm = "camproxy.io/arm"
	// AnnotationPort and AnnotationAdminPort move the sidecar off 8080 / 9090 when the
	// agent already uses them.
	AnnotationPort      = "camproxy.io/port"
	AnnotationAdminPort = "camproxy.io/admin-port"
	// AnnotationStatus is set to StatusInjected on every injected pod; such a pod is
	// never injected again.
	AnnotationStatus = "camproxy.io/status"
	StatusInjected   = "injected"
	// annotationDefaultContainer keeps `kubectl logs/exec` on the agent when camproxy
	// is added as the first regular container.
	annotationDefaultContainer = "kubectl.kubernetes.io/default-container"
)

// The sidecar's fixed layout.
const (
	ContainerName    = "camproxy"
	ConfigVolume     = "camproxy-config"
	DataVolume       = "camproxy-data"
	ConfigDir        = "/etc/camproxy"
	ConfigKey        = "config.yaml" // the ConfigMap key camproxy serve reads
	DataDir          = "/var/lib/camproxy"
	DefaultPort      = 8080
	DefaultAdminPort = 9090
	// NonRootUID is distroless's nonroot user, the image's USER.
	NonRootUID = 65532
)

// Environment variables of the sidecar. The config in the ConfigMap refers to them
// with ${VAR:-default}, so the same file serves a gateway (defaults) and a sidecar.
const (
	EnvListen            = "CAMPROXY_LISTEN"              // server.listen: the data plane, loopback only
	EnvAdminListen       = "CAMPROXY_ADMIN_LISTEN"        // server.admin_listen: probes and metrics
	EnvAdminLoopbackOnly = "CAMPROXY_ADMIN_LOOPBACK_ONLY" // admin.loopback_only: the admin API to the pod's own containers
	EnvExperiment        = "CAMPROXY_EXPERIMENT"          // experiment.name
	EnvArm               = "CAMPROXY_ARM"                 // the pinned arm (informational)
	EnvAdaptive          = "CAMPROXY_ADAPTIVE"            // experiment.adaptive.enabled: "false" on a pinned pod
	EnvWeightPref        = "CAMPROXY_WEIGHT_"             // + arm name: experiment.arms[].weight
)

// Options is the injector's configuration: what it injects.
type Options struct {
	Image           string            // the camproxy image of the sidecar
	ImagePullPolicy corev1.PullPolicy // "" = the cluster's default
	ConfigMap       string            // ConfigMap used when a pod sets no camproxy.io/config
	// Arms are the experiment's arm names, as in the ConfigMap's experiment.arms.
	// camproxy.io/arm can pin only these (it sets each arm's CAMPROXY_WEIGHT_<ARM>).
	Arms          []string
	CPURequest    string // Kubernetes quantities of the sidecar's resources; "" = none
	MemoryRequest string
	CPULimit      string
	MemoryLimit   string
	// SelfLabel, "key=value", marks the injector's own pods, which are never injected.
	SelfLabel string
}

// DefaultImage is the sidecar image of a camproxy version: the image of that tag,
// or of latest for a development build ("" or "dev").
func DefaultImage(version string) string {
	tag := version
	if tag == "" || tag == "dev" {
		tag = "latest"
	}
	return "ghcr.io/camproxy/camproxy:" + tag
}

// DefaultOptions returns the defaults, with the sidecar image given.
func DefaultOptions(image string) Options {
	return Options{
		Image:         image,
		ConfigMap:     "camproxy",
		CPURequest:    "100m",
		MemoryRequest: "128Mi",
		CPULimit:      "2",
		MemoryLimit:   "512Mi",
		SelfLabel:     "app.kubernetes.io/name=camproxy-injector",
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate reports every problem, each naming its field.
func (o Options) Validate() error {
	var errs []error
	if strings.TrimSpace(o.Image) == "" || strings.ContainsAny(o.Image, " \t\n") {
		errs = append(errs, fmt.Errorf("image: %q is not an image reference", o.Image))
	}
	switch o.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("image pull policy: %q is not Always, IfNotPresent or Never", o.ImagePullPolicy))
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.ConfigMap) {
		errs = append(errs, fmt.Errorf("config map: %q: %s", o.ConfigMap, msg))
	}
	seen := map[string]string{}
	for _, a := range o.Arms {
		if !nameRE.MatchString(a) {
			errs = append(errs, fmt.Errorf("arms: %q: want 1-63 of A-Z a-z 0-9 . _ -, starting with a letter or digit", a))
			continue
		}
		env := WeightEnv(a)
		if other, ok := seen[env]; ok {
			errs = append(errs, fmt.Errorf("arms: %q and %q share the variable %s", other, a, env))
		}
		seen[env] = a
	}
	for _, q := range []struct{ name, v string }{
		{"cpu request", o.CPURequest}, {"memory request", o.MemoryRequest},
		{"cpu limit", o.CPULimit}, {"memory limit", o.MemoryLimit},
	} {
		if q.v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", q.name, q.v, err))
		}
	}
	if o.SelfLabel != "" {
		k, v, ok := strings.Cut(o.SelfLabel, "=")
		if !ok || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			errs = append(errs, fmt.Errorf("self label: %q: want key=value, a valid label", o.SelfLabel))
		}
	}
	return errors.Join(errs...)
}

// resources builds the sidecar's requests and limits; o must be valid.
func (o Options) resources() corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	set := func(l *corev1.ResourceList, name corev1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *l == nil {
			*l = corev1.ResourceList{}
		}
		(*l)[name] = resource.MustParse(v)
	}
	set(&r.Requests, corev1.ResourceCPU, o.CPURequest)
	set(&r.Requests, corev1.ResourceMemory, o.MemoryRequest)
	set(&r.Limits, corev1.ResourceCPU, o.CPULimit)
	set(&r.Limits, corev1.ResourceMemory, o.MemoryLimit)
	return r
}

// WeightEnv is the variable holding an arm's weight: CAMPROXY_WEIGHT_ + the arm's
// name in upper case, every character that is not a letter or digit turned into _.
func WeightEnv(arm string) string {
	b := []byte(strings.ToUpper(arm))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return EnvWeightPref + string(b)
}

// settings are one pod's choices, read from its annotations.
type settings struct {
	native      bool
	overrideEnv bool
	configMap   string
	experiment  string
	arm         string
	port        int32
	adminPort   int32
}

// readSettings parses a pod's annotations; every problem is reported.
func (o Options) readSettings(ann map[string]string) (settings, error) {
	s := settings{native: true, configMap: o.ConfigMap, port: DefaultPort, adminPort: DefaultAdminPort}
	var errs []error
	boolean := func(key string, dst *bool) {
		v, ok := ann[key]
		if !ok {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not true or false", key, v))
			return
		}
		*dst = b
	}
	boolean(AnnotationNativeSidecar, &s.native)
	boolean(AnnotationOverrideEnv, &s.overrideEnv)
	if v, ok := ann[AnnotationConfig]; ok {
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a ConfigMap name: %s", AnnotationConfig, v, strings.Join(msgs, "; ")))
		} else {
			s.configMap = v
		}
	}
	if v, ok := ann[AnnotationExperiment]; ok {
		if !nameRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s: %q: want 1-63 of A-Z a-z 0-9 . _ -", AnnotationExperiment, v))
		} else {
			s.experiment = v
		}
	}
	if v, ok := ann[AnnotationArm]; ok {
		switch {
		case len(o.Arms) == 0:
			errs = append(errs, fmt.Errorf("%s: %q: this injector knows no arms (start it with --arms)", AnnotationArm, v))
		case !slices.Contains(o.Arms, v):
			errs = append(errs, fmt.Errorf("%s: %q is not one of the arms %s", AnnotationArm, v, strings.Join(o.Arms, ", ")))
		default:
			s.arm = v
		}
	}
	port := func(key string, dst *int32) {
		v, ok := ann[key]
		if !ok {
			return
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s: %q is not a port (1-65535)", key, v))
			return
		}
		*dst = int32(n)
	}
	port(AnnotationPort, &s.port)
	port(AnnotationAdminPort, &s.adminPort)
	if s.port == s.adminPort {
		errs = append(errs, fmt.Errorf("%s and %s: both are %d", AnnotationPort, AnnotationAdminPort, s.port))
	}
	return s, errors.Join(errs...)
}
