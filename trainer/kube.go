package trainer

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// A stage's job.yaml must start on a cluster that has never seen --out: the Job
// carries the files its script reads. Small stages put them in a ConfigMap that an
// init container copies into the stage directory; a stage too large for one (the
// API server refuses objects over 1 MiB) reads them from the claim, where an init
// container checks that every file is there, whole, before the GPUs are taken.
//
// The stage directory is mounted at the absolute path of --out, the path the
// generated files name (model paths and output_dir are absolute since the writers
// resolve them), so every path in run.sh and the YAML means the same in the pod as
// here. A local starting model is mounted at its own path from --model-pvc.

// KubeOptions say how a stage's Job runs: its image, GPUs and volumes.
type KubeOptions struct {
	Image        string // container image with the stage's tool installed
	Namespace    string // "" = the kubectl context's
	Name         string // the Job's name (and its ConfigMap's)
	GPUs         int    // nvidia.com/gpu requested
	PVC          string // claim holding the stage directory; "" = an emptyDir (checkpoints go with the pod)
	SubPath      string // --out's path inside PVC; "" = the claim's root
	ModelPVC     string // claim holding a local starting model
	ModelSubPath string // the model's path inside ModelPVC; "" = the claim's root
	BackoffLimit int32  // retries of a failed pod (a lost node, a preemption); 0 = DefaultBackoffLimit, <0 = none
}

// DefaultBackoffLimit lets a Job survive a lost node or a preemption twice; a run
// that fails by itself (a missing tool, a bad config) is failed at once by the
// Job's pod failure policy instead of being retried blindly.
const DefaultBackoffLimit = 2

// configMapBudget is how many bytes of files go into a ConfigMap at most: 1 MiB
// is the API server's limit for the whole object, base64 and metadata included.
const configMapBudget = 900 << 10

// filesMount is where the ConfigMap is mounted in the init container.
const filesMount = "/camproxy/files"

// Exit codes after which a retry cannot help: 127 (run.sh: the tool is not in
// the image), 2 (a usage error of the tool or of bash).
var permanentExits = []int32{2, 127}

// StageJob is what RenderStageJob renders.
type StageJob struct {
	Stage  string   // sft | dpo | grpo
	Dir    string   // the stage directory (--out)
	Script string   // what runs, relative to Dir: run.sh, grpo.sh
	Files  []string // the files the script reads, relative to Dir (Script included)
	Model  string   // the starting model as the files name it: a hub id or an absolute path
	Writes []string // absolute directories the tool writes (checkpoints): they must be in Dir
	Env    []corev1.EnvVar
	Kube   KubeOptions
}

// JobFiles are the files a Job carries: every written file but the manifest
// itself and what no tool reads (pairs.jsonl, the Ray script).
func JobFiles(written []string) []string {
	var out []string
	for _, f := range written {
		switch f {
		case "job.yaml", "rayjob.yaml", "pairs.jsonl", "grpo-ray.sh":
			continue
		}
		out = append(out, f)
	}
	return out
}

// stagePod is what every pod of a stage runs with: its files, volumes, the init
// container that puts the files in place, and the training container.
type stagePod struct {
	header  bytes.Buffer // comments, then the ConfigMap when there is one
	spec    corev1.PodSpec
	labels  map[string]string
	backoff int32
	ttl     int32
}

// RenderStageJob renders job.yaml: a ConfigMap and a Job (the files small enough),
// or a Job reading them from the claim. It reads the files from j.Dir.
func RenderStageJob(j StageJob) ([]byte, error) {
	p, err := renderStagePod(j, "job.yaml")
	if err != nil {
		return nil, err
	}
	p.spec.RestartPolicy = corev1.RestartPolicyNever
	job := batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Kube.Name, Namespace: j.Kube.Namespace, Labels: p.labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            &p.backoff,
			TTLSecondsAfterFinished: &p.ttl,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr("train"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: permanentExits}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.labels}, Spec: p.spec},
		},
	}
	return p.document(job)
}

func (p *stagePod) document(obj any) ([]byte, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append(p.header.Bytes(), b...), nil
}

func renderStagePod(j StageJob, file string) (*stagePod, error) {
	k := j.Kube
	if k.Image == "" || k.Name == "" || k.GPUs < 1 {
		return nil, fmt.Errorf("%s: an image, a name and 1 or more GPUs are required", file)
	}
	if errs := validName(k.Name); errs != "" {
		return nil, fmt.Errorf("%s: job name %q: %s", file, k.Name, errs)
	}
	dir, err := filepath.Abs(j.Dir)
	if err != nil {
		return nil, err
	}
	dir = filepath.ToSlash(dir)
	files := slices.Clone(j.Files)
	slices.Sort(files)
	cm, size, err := filesConfigMap(j.Dir, files, k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	useCM := size <= configMapBudget
	if !useCM && k.PVC == "" {
		return nil, fmt.Errorf("%s: the %s files are %d KiB, too large for a ConfigMap (%d KiB): give the claim they are copied to (--pvc, --job-path)", file, j.Stage, size>>10, configMapBudget>>10)
	}
	modelMount, err := modelVolume(j.Model, dir, k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, w := range j.Writes {
		if w = filepath.ToSlash(w); w != dir && !strings.HasPrefix(w, dir+"/") {
			return nil, fmt.Errorf("%s: the checkpoints go to %s, outside %s: the Job mounts only the stage directory", file, w, dir)
		}
	}

	work := corev1.Volume{Name: "stage", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if k.PVC != "" {
		work.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.PVC}}
	}
	workMount := corev1.VolumeMount{Name: "stage", MountPath: dir, SubPath: strings.Trim(path.Clean("/"+filepath.ToSlash(k.SubPath)), "/")}
	shm := resource.MustParse("64Gi")
	volumes := []corev1.Volume{work, {Name: "dshm", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &shm}}}}
	mounts := []corev1.VolumeMount{workMount, {Name: "dshm", MountPath: "/dev/shm"}}
	if modelMount != nil {
		volumes = append(volumes, corev1.Volume{Name: "model", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.ModelPVC, ReadOnly: true}}})
		mounts = append(mounts, *modelMount)
	}

	var init corev1.Container
	if useCM {
		// Copy each file to its place: a ConfigMap volume is read-only and its
		// entries are symbolic links; the trainers write next to their files.
		volumes = append(volumes, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, Items: cmItems(files, j.Script)}}})
		init = corev1.Container{
			Name: "copy-files", Image: k.Image,
			Command: append([]string{"sh", "-c", `set -eu
for f in "$@"; do mkdir -p "$(dirname "$STAGE_DIR/$f")"; cp "` + filesMount + `/$f" "$STAGE_DIR/$f"; done
chmod 755 "$STAGE_DIR/$SCRIPT"`, "copy-files"}, files...),
			VolumeMounts: []corev1.VolumeMount{workMount, {Name: "files", MountPath: filesMount, ReadOnly: true}},
		}
	} else {
		init = corev1.Container{
			Name: "check-files", Image: k.Image,
			Command: append([]string{"sh", "-c", `missing=0
for f in "$@"; do
  name=${f%:*}; want=${f##*:}
  if [ ! -f "$STAGE_DIR/$name" ]; then echo "check-files: $STAGE_DIR/$name is missing" >&2; missing=1
  elif [ "$(wc -c < "$STAGE_DIR/$name" | tr -d ' ')" != "$want" ]; then echo "check-files: $STAGE_DIR/$name is not $want bytes: copied in part?" >&2; missing=1
  fi
done
if [ "$missing" != 0 ]; then echo "check-files: copy the stage directory written by camproxy train to the claim first" >&2; exit 1; fi`, "check-files"}, sizedFiles(j.Dir, files)...),
			VolumeMounts: []corev1.VolumeMount{workMount},
		}
	}
	init.Env = []corev1.EnvVar{{Name: "STAGE_DIR", Value: dir}, {Name: "SCRIPT", Value: j.Script}}

	gpus := resource.MustParse(strconv.Itoa(k.GPUs))
	p := &stagePod{backoff: k.BackoffLimit, ttl: 7 * 24 * 3600,
		labels: map[string]string{"app.kubernetes.io/name": "camproxy-train", "app.kubernetes.io/component": j.Stage, "app.kubernetes.io/instance": k.Name}}
	switch {
	case p.backoff == 0:
		p.backoff = DefaultBackoffLimit
	case p.backoff < 0:
		p.backoff = 0
	}
	p.spec = corev1.PodSpec{
		InitContainers: []corev1.Container{init},
		Containers: []corev1.Container{{
			Name:       "train",
			Image:      k.Image,
			Command:    []string{"bash", path.Join(dir, j.Script)},
			WorkingDir: dir,
			Env:        append([]corev1.EnvVar{{Name: "HF_HOME", Value: path.Join(dir, ".hf")}}, j.Env...),
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": gpus},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": gpus},
			},
			VolumeMounts: mounts,
		}},
		Volumes:     volumes,
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	b := &p.header
	fmt.Fprintf(b, "# Written by camproxy train %s: kubectl apply -f %s\n", j.Stage, file)
	if useCM {
		fmt.Fprintf(b, "# The ConfigMap carries the %d files %s reads (%d KiB); an init container copies them to %s.\n", len(files), j.Script, size>>10, dir)
		if k.PVC == "" {
			b.WriteString("# No --pvc: the stage directory is an emptyDir, and the checkpoints go with the pod.\n")
		}
		cmYAML, err := yaml.Marshal(cm)
		if err != nil {
			return nil, err
		}
		b.Write(cmYAML)
		b.WriteString("---\n")
	} else {
		fmt.Fprintf(b, "# The files (%d KiB) are too large for a ConfigMap: copy %s to the claim %s at %q first;\n# an init container checks that each is there, whole.\n", size>>10, dir, k.PVC, "/"+workMount.SubPath)
	}
	return p, nil
}

func ptr[T any](v T) *T { return &v }

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validName checks a Job name: a DNS label of at most 63 characters, since the
// Job controller puts it in its pods' job-name label.
func validName(n string) string {
	if len(n) > 63 || !dnsLabel.MatchString(n) {
		return "want lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit"
	}
	return ""
}

// cmKey is a file's key in the ConfigMap: keys may not hold '/'.
func cmKey(rel string) string {
	var b strings.Builder
	for _, r := range rel {
		switch {
		case r == '/':
			b.WriteString("__")
		case r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// filesConfigMap holds the files, text as data and the rest (parquet) as
// binaryData; size is what they weigh in the object.
func filesConfigMap(dir string, files []string, k KubeOptions) (*corev1.ConfigMap, int, error) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: k.Name + "-files", Namespace: k.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "camproxy-train", "app.kubernetes.io/instance": k.Name}},
	}
	size := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, 0, fmt.Errorf("%w", err)
		}
		key := cmKey(f)
		if _, dup := cm.Data[key]; dup || cm.BinaryData[key] != nil {
			return nil, 0, fmt.Errorf("two files map to the ConfigMap key %q", key)
		}
		if utf8.Valid(data) {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[key] = string(data)
			size += len(data)
		} else {
			if cm.BinaryData == nil {
				cm.BinaryData = map[string][]byte{}
			}
			cm.BinaryData[key] = data
			size += (len(data) + 2) / 3 * 4
		}
	}
	return cm, size, nil
}

func cmItems(files []string, script string) []corev1.KeyToPath {
	items := make([]corev1.KeyToPath, 0, len(files))
	for _, f := range files {
		kp := corev1.KeyToPath{Key: cmKey(f), Path: f}
		if f == script {
			kp.Mode = ptr(int32(0o755))
		}
		items = append(items, kp)
	}
	return items
}

func sizedFiles(dir string, files []string) []string {
	out := make([]string, 0, len(files))
	for _, f := range files {
		n := int64(-1)
		if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f))); err == nil {
			n = st.Size()
		}
		out = append(out, f+":"+strconv.FormatInt(n, 10))
	}
	return out
}

// modelVolume mounts a local starting model at its own path: it comes from
// --model-pvc unless it is inside the stage directory. A hub id needs nothing.
func modelVolume(model, dir string, k KubeOptions) (*corev1.VolumeMount, error) {
	if model == "" || !strings.HasPrefix(model, "/") || model == dir || strings.HasPrefix(model, dir+"/") {
		if k.ModelPVC != "" {
			return nil, fmt.Errorf("--model-pvc %s is given but the model %q is not a local path outside the stage directory", k.ModelPVC, model)
		}
		return nil, nil
	}
	if k.ModelPVC == "" {
		return nil, fmt.Errorf("the model %s is a local directory: name the claim holding it (--model-pvc, with --model-subpath its path there), or start from a hub id", model)
	}
	return &corev1.VolumeMount{Name: "model", MountPath: model, ReadOnly: true,
		SubPath: strings.Trim(path.Clean("/"+filepath.ToSlash(k.ModelSubPath)), "/")}, nil
}

// writeJob renders the stage's job.yaml from the files out has written and
// writes it.
func writeJob(out *fileSet, j StageJob) []string {
	return writeManifest(out, j, "job.yaml", RenderStageJob)
}

// writeManifest writes name, rendered from the files out has written. When the
// manifest could not start (a local model without the claim holding it, files too
// large without a claim) it is left out and the reason comes back as a warning:
// the stage itself still runs locally.
func writeManifest(out *fileSet, j StageJob, name string, render func(StageJob) ([]byte, error)) []string {
	if out.err != nil {
		return nil
	}
	j.Dir, j.Files = out.dir, JobFiles(out.files)
	b, err := render(j)
	if err != nil {
		return []string{fmt.Sprintf("%v; %s is not written", err, name)}
	}
	out.write(name, b, 0o644)
	return nil
}

// stageJob is a LLaMA-Factory stage's Job: run.sh, from the recipe's image, GPUs
// and claim.
func (o LFOptions) stageJob(stage string) StageJob {
	k := o.Kube
	k.Image, k.Namespace, k.Name, k.GPUs, k.PVC, k.SubPath = o.Recipe.Image, o.Recipe.Namespace, o.Recipe.RunName, o.Recipe.GPUs, o.Recipe.PVC, o.JobPath
	return StageJob{Stage: stage, Script: "run.sh", Model: o.Recipe.Model, Kube: k, Writes: []string{o.Recipe.OutputDir},
		Env: []corev1.EnvVar{{Name: "FORCE_TORCHRUN", Value: "1"}}}
}

// writeJob writes GRPO's job.yaml (grpo.sh on one node, where veRL starts its own
// Ray), or on several nodes rayjob.yaml (a KubeRay RayJob).
func (o GRPOOptions) writeJob(out *fileSet) []string {
	k := o.Kube
	k.GPUs = o.GPUs
	j := StageJob{Stage: "grpo", Script: "grpo.sh", Model: o.Model, Kube: k, Writes: []string{o.CheckpointDir},
		Env: []corev1.EnvVar{{Name: "CAMPROXY_ROLLOUT_URL", Value: o.RolloutURL}}}
	if o.Nodes == 1 {
		return writeJob(out, j)
	}
	return writeManifest(out, j, "rayjob.yaml", func(j StageJob) ([]byte, error) { return RenderStageRayJob(j, o.Nodes) })
}

// DefaultGRPOImage is veRL's image with vLLM (docs/start/install.rst of veRL 0.7.0).
const DefaultGRPOImage = "verlai/verl:vllm011.latest"

// KubeRay's RayJob (ray.io/v1), the fields camproxy sets, with the JSON names of
// ray-operator/apis/ray/v1/rayjob_types.go and raycluster_types.go (KubeRay v1.5):
// the operator starts a Ray cluster, submits the entrypoint to it and tears it down.
type rayJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              rayJobSpec `json:"spec"`
}

type rayJobSpec struct {
	Entrypoint               string         `json:"entrypoint,omitempty"`
	BackoffLimit             *int32         `json:"backoffLimit,omitempty"`
	ShutdownAfterJobFinishes bool           `json:"shutdownAfterJobFinishes,omitempty"`
	TTLSecondsAfterFinished  int32          `json:"ttlSecondsAfterFinished,omitempty"`
	RayClusterSpec           rayClusterSpec `json:"rayClusterSpec"`
}

type rayClusterSpec struct {
	HeadGroupSpec    rayHeadGroup     `json:"headGroupSpec"`
	WorkerGroupSpecs []rayWorkerGroup `json:"workerGroupSpecs,omitempty"`
}

type rayHeadGroup struct {
	RayStartParams map[string]string      `json:"rayStartParams"`
	Template       corev1.PodTemplateSpec `json:"template"`
}

type rayWorkerGroup struct {
	GroupName      string                 `json:"groupName"`
	Replicas       *int32                 `json:"replicas,omitempty"`
	MinReplicas    *int32                 `json:"minReplicas"`
	MaxReplicas    *int32                 `json:"maxReplicas"`
	RayStartParams map[string]string      `json:"rayStartParams"`
	Template       corev1.PodTemplateSpec `json:"template"`
}

// RenderStageRayJob renders GRPO on nodes nodes as a RayJob: a head and nodes-1
// workers, each with the GPUs and the stage's files (the reward loop's workers
// import reward.py where they run); veRL's driver joins the cluster (ray.init in a
// submitted job). Every rank saves its shard under the stage directory, so it must
// be a claim all nodes mount (ReadWriteMany).
func RenderStageRayJob(j StageJob, nodes int) ([]byte, error) {
	if j.Kube.PVC == "" {
		return nil, fmt.Errorf("rayjob.yaml: %d nodes save their checkpoint shards to one directory: give a ReadWriteMany claim (--pvc)", nodes)
	}
	p, err := renderStagePod(j, "rayjob.yaml")
	if err != nil {
		return nil, err
	}
	pod := func(name string) corev1.PodTemplateSpec {
		spec := *p.spec.DeepCopy()
		c := &spec.Containers[0]
		c.Name, c.Command = name, nil // KubeRay runs ray start in the first container
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.labels}, Spec: spec}
	}
	workers := int32(nodes - 1)
	rj := rayJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ray.io/v1", Kind: "RayJob"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Kube.Name, Namespace: j.Kube.Namespace, Labels: p.labels},
		Spec: rayJobSpec{
			Entrypoint:               "bash " + path.Join(p.spec.Containers[0].WorkingDir, j.Script),
			BackoffLimit:             &p.backoff,
			ShutdownAfterJobFinishes: true,
			TTLSecondsAfterFinished:  p.ttl,
			RayClusterSpec: rayClusterSpec{
				HeadGroupSpec: rayHeadGroup{RayStartParams: map[string]string{}, Template: pod("ray-head")},
				WorkerGroupSpecs: []rayWorkerGroup{{GroupName: "gpu", Replicas: &workers, MinReplicas: &workers, MaxReplicas: &workers,
					RayStartParams: map[string]string{}, Template: pod("ray-worker")}},
			},
		},
	}
	return p.document(rj)
}
