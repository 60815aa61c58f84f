package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Mode says how a pod came to the webhook, and so how it opts in.
type Mode int

const (
	// PodOptIn: the pod is injected only with camproxy.io/inject: "true".
	PodOptIn Mode = iota
	// NamespaceOptIn: the pod's namespace is labelled camproxy.io/inject=enabled;
	// the pod is injected unless it says camproxy.io/inject: "false".
	NamespaceOptIn
)

// Op is one RFC 6902 JSON Patch operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Result is the decision on one pod.
type Result struct {
	Patch    []Op     // nil: the pod is left as it is
	Reason   string   // why, for the log
	Warnings []string // for the user who created the pod (kubectl prints them)
}

// Mutator decides whether and how a pod is injected. It is pure: pod bytes in,
// JSON Patch out.
type Mutator struct {
	o                  Options
	selfKey, selfValue string
	hasSelfLabel       bool
}

// NewMutator validates o.
func NewMutator(o Options) (*Mutator, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m := &Mutator{o: o}
	m.selfKey, m.selfValue, m.hasSelfLabel = strings.Cut(o.SelfLabel, "=")
	return m, nil
}

// Mutate decides on the pod in raw (its JSON, as the AdmissionRequest carries it).
// The patch touches only what it adds or replaces, so fields this version of
// k8s.io/api does not know survive.
func (m *Mutator) Mutate(raw []byte, mode Mode) Result {
	// Case-sensitive, as the apiserver and JSON Patch paths are.
	var pod corev1.Pod
	if err := utiljson.Unmarshal(raw, &pod); err != nil {
		return Result{Reason: "not a pod: " + err.Error()}
	}
	ann := pod.Annotations
	switch {
	case ann[AnnotationStatus] == StatusInjected:
		return Result{Reason: "already injected"}
	case hasContainer(pod.Spec.Containers, ContainerName) || hasContainer(pod.Spec.InitContainers, ContainerName):
		return Result{Reason: "already has a container named " + ContainerName}
	case m.hasSelfLabel && pod.Labels[m.selfKey] == m.selfValue:
		return Result{Reason: "the injector's own pod"}
	case pod.Spec.HostNetwork:
		return Result{Reason: "host network"}
	case len(pod.Spec.Containers) == 0:
		return Result{Reason: "no containers"}
	}
	optIn, set := ann[AnnotationInject]
	want, err := strconv.ParseBool(optIn)
	switch {
	case set && err != nil:
		return Result{Reason: "bad " + AnnotationInject, Warnings: []string{
			fmt.Sprintf("camproxy: not injected: %s: %q is not true or false", AnnotationInject, optIn)}}
	case mode == PodOptIn && !want:
		return Result{Reason: "not opted in"}
	case mode == NamespaceOptIn && set && !want:
		return Result{Reason: "opted out"}
	}
	s, err := m.o.readSettings(ann)
	if err != nil {
		return notInjected(err.Error())
	}
	if msg := conflicts(&pod, s); msg != "" {
		return notInjected(msg)
	}
	return Result{Patch: m.patch(&pod, s, hasMetadata(raw)), Reason: "injected"}
}

func notInjected(why string) Result {
	return Result{Reason: why, Warnings: []string{"camproxy: not injected: " + why}}
}

// conflicts names what in the pod stands in the sidecar's way: a port it binds
// (containers share the pod's network) or a volume name it adds.
func conflicts(pod *corev1.Pod, s settings) string {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, p := range c.Ports {
				if p.ContainerPort == s.port || p.ContainerPort == s.adminPort {
					return fmt.Sprintf("container %q uses port %d; choose other ports with %s / %s",
						c.Name, p.ContainerPort, AnnotationPort, AnnotationAdminPort)
				}
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == ConfigVolume || v.Name == DataVolume {
			return fmt.Sprintf("the pod already has a volume named %q", v.Name)
		}
	}
	return ""
}

// hasMetadata reports whether the object has a metadata object to add annotations to.
func hasMetadata(raw []byte) bool {
	var o struct {
		Metadata map[string]any `json:"metadata"`
	}
	return utiljson.Unmarshal(raw, &o) == nil && o.Metadata != nil
}

func (m *Mutator) patch(pod *corev1.Pod, s settings, metadata bool) []Op {
	var ops []Op
	// Env first, while the container indices are the pod's own.
	for i, c := range pod.Spec.Containers {
		ops = append(ops, envOps(fmt.Sprintf("/spec/containers/%d/env", i), c.Env, AppEnv(s.port), s.overrideEnv)...)
	}
	side := m.o.sidecar(s)
	switch {
	case s.native && len(pod.Spec.InitContainers) == 0:
		ops = append(ops, Op{"add", "/spec/initContainers", []corev1.Container{side}})
	case s.native:
		// First, so it is up before the other init containers and the app.
		ops = append(ops, Op{"add", "/spec/initContainers/0", side})
	default:
		ops = append(ops, Op{"add", "/spec/containers/0", side})
	}
	if len(pod.Spec.Volumes) == 0 {
		ops = append(ops, Op{"add", "/spec/volumes", volumes(s)})
	} else {
		for _, v := range volumes(s) {
			ops = append(ops, Op{"add", "/spec/volumes/-", v})
		}
	}
	add := map[string]string{AnnotationStatus: StatusInjected}
	if _, ok := pod.Annotations[annotationDefaultContainer]; !ok && !s.native {
		add[annotationDefaultContainer] = pod.Spec.Containers[0].Name
	}
	switch {
	case !metadata:
		ops = append(ops, Op{"add", "/metadata", map[string]any{"annotations": add}})
	case pod.Annotations == nil:
		ops = append(ops, Op{"add", "/metadata/annotations", add})
	default:
		for _, k := range []string{AnnotationStatus, annotationDefaultContainer} {
			if v, ok := add[k]; ok {
				ops = append(ops, Op{"add", "/metadata/annotations/" + escape(k), v})
			}
		}
	}
	return ops
}

// envOps sets each of want on a container whose env is have (at path). A variable the
// container sets already (by value or valueFrom) is kept unless override.
func envOps(path string, have, want []corev1.EnvVar, override bool) []Op {
	var ops []Op
	var missing []corev1.EnvVar
	for _, w := range want {
		found := false
		for j, h := range have {
			if h.Name != w.Name {
				continue
			}
			found = true
			if override && (h.Value != w.Value || h.ValueFrom != nil) {
				ops = append(ops, Op{"replace", fmt.Sprintf("%s/%d", path, j), w})
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	switch {
	case len(missing) == 0:
	case len(have) == 0:
		ops = append(ops, Op{"add", path, missing})
	default:
		for _, e := range missing {
			ops = append(ops, Op{"add", path + "/-", e})
		}
	}
	return ops
}

func hasContainer(cs []corev1.Container, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}

// escape makes s one JSON Pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
