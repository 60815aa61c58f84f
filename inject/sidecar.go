package inject

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AppEnv is what every app container gets: the base URLs of the three wire APIs,
// on the sidecar's data port.
func AppEnv(port int32) []corev1.EnvVar {
	base := "http://127.0.0.1:" + strconv.Itoa(int(port))
	return []corev1.EnvVar{
		{Name: "OPENAI_BASE_URL", Value: base + "/v1"},
		{Name: "ANTHROPIC_BASE_URL", Value: base},
		{Name: "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", Value: base},
	}
}

// sidecarEnv is the sidecar's own environment, read by ${VAR} in its config.
func (o Options) sidecarEnv(s settings) []corev1.EnvVar {
	env := []corev1.EnvVar{
		// The data plane serves the pod's own containers only.
		{Name: EnvListen, Value: fmt.Sprintf("127.0.0.1:%d", s.port)},
		// The kubelet probes the admin plane on the pod's IP.
		{Name: EnvAdminListen, Value: fmt.Sprintf(":%d", s.adminPort)},
		// … but its API (feedback, episodes, the dashboard) only to the pod's own
		// containers: a sidecar has no admin token.
		{Name: EnvAdminLoopbackOnly, Value: "true"},
	}
	if s.experiment != "" {
		env = append(env, corev1.EnvVar{Name: EnvExperiment, Value: s.experiment})
	}
	if s.arm != "" {
		env = append(env,
			corev1.EnvVar{Name: EnvArm, Value: s.arm},
			// Allocation must not move traffic back onto the arms weighted 0.
			corev1.EnvVar{Name: EnvAdaptive, Value: "false"})
		for _, a := range o.Arms {
			w := "0"
			if a == s.arm {
				w = "1"
			}
			env = append(env, corev1.EnvVar{Name: WeightEnv(a), Value: w})
		}
	}
	return env
}

// sidecar is the camproxy container for a pod with settings s.
func (o Options) sidecar(s settings) corev1.Container {
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString("camproxy-admin"), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
		}
	}
	c := corev1.Container{
		Name:            ContainerName,
		Image:           o.Image,
		ImagePullPolicy: o.ImagePullPolicy,
		Args:            []string{"serve", "--config", ConfigDir + "/" + ConfigKey},
		// Relative paths of the config (the default replay sink and spool,
		// ./camproxy-data/…) land on the writable emptyDir.
		WorkingDir: DataDir,
		Ports: []corev1.ContainerPort{
			{Name: "camproxy", ContainerPort: s.port, Protocol: corev1.ProtocolTCP},
			{Name: "camproxy-admin", ContainerPort: s.adminPort, Protocol: corev1.ProtocolTCP},
		},
		Env:       o.sidecarEnv(s),
		Resources: o.resources(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: ConfigVolume, MountPath: ConfigDir, ReadOnly: true},
			{Name: DataVolume, MountPath: DataDir},
		},
		// /healthz answers once both listeners are bound: a native sidecar is
		// "started" then, and only then do the app containers start.
		StartupProbe:   probe("/healthz", 1, 60),
		ReadinessProbe: probe("/readyz", 5, 3),
		LivenessProbe:  probe("/healthz", 10, 3),
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr(true),
			RunAsUser:                ptr(int64(NonRootUID)),
			RunAsGroup:               ptr(int64(NonRootUID)),
			ReadOnlyRootFilesystem:   ptr(true),
			AllowPrivilegeEscalation: ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if s.native {
		c.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
	}
	return c
}

// volumes are the sidecar's config (the ConfigMap) and its writable data directory.
func volumes(s settings) []corev1.Volume {
	return []corev1.Volume{
		{Name: ConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.configMap},
		}}},
		{Name: DataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
}

func ptr[T any](v T) *T { return &v }
