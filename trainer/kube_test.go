package trainer

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// stageManifests are the objects of a job.yaml, strictly decoded into k8s.io/api
// types: a field the API does not know fails the decode.
type stageManifests struct {
	cm  *corev1.ConfigMap
	job *batchv1.Job
}

func decodeJobYAML(t *testing.T, b []byte) stageManifests {
	t.Helper()
	var m stageManifests
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("job.yaml document %d: %v", i, err)
		}
		switch meta.Kind {
		case "ConfigMap":
			m.cm = new(corev1.ConfigMap)
			if err := sigsyaml.UnmarshalStrict(doc, m.cm); err != nil {
				t.Fatalf("job.yaml ConfigMap: %v", err)
			}
		case "Job":
			m.job = new(batchv1.Job)
			if err := sigsyaml.UnmarshalStrict(doc, m.job); err != nil {
				t.Fatalf("job.yaml Job: %v", err)
			}
		default:
			t.Fatalf("job.yaml document %d: kind %q", i, meta.Kind)
		}
	}
	if m.job == nil {
		t.Fatalf("job.yaml has no Job:\n%s", b)
	}
	return m
}

var (
	lfTrainRe   = regexp.MustCompile(`llamafactory-cli train (\S+)`)
	grpoDirRe   = regexp.MustCompile(`GRPO_DIR="?\$\{CAMPROXY_GRPO_DIR:-'?([^}']+)'?\}`)
	grpoFileRe  = regexp.MustCompile(`=\$GRPO_DIR/([^"\s]+)"`)
	absOptionRe = regexp.MustCompile(`(?m)^\s*'?([a-z_.]+(?:path|dir))=(/[^'"\s\\]+)`)
)

// referenced lists what a stage's script reads, relative to its directory, and
// the absolute paths it names (models, checkpoints): read from the files written,
// the way the tools read them.
func referenced(t *testing.T, dir, script string) (files []string, abs map[string]string) {
	t.Helper()
	abs = map[string]string{}
	sh, err := os.ReadFile(filepath.Join(dir, script))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, script)
	if m := lfTrainRe.FindSubmatch(sh); m != nil { // run.sh → the YAML → data and DeepSpeed
		name := string(m[1])
		files = append(files, name)
		var cfg map[string]any
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("run.sh trains %s: %v", name, err)
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		str := func(k string) string { s, _ := cfg[k].(string); return s }
		if ds := str("deepspeed"); ds != "" {
			files = append(files, ds)
		}
		dd := str("dataset_dir")
		files = append(files, path.Join(dd, "dataset_info.json"))
		var info map[string]struct {
			FileName string `yaml:"file_name"`
		}
		ib, err := os.ReadFile(filepath.Join(dir, dd, "dataset_info.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(ib, &info); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"dataset", "eval_dataset"} {
			for _, n := range strings.Split(str(k), ",") {
				if n != "" {
					files = append(files, path.Join(dd, info[n].FileName))
				}
			}
		}
		for _, k := range []string{"model_name_or_path", "output_dir"} {
			if strings.HasPrefix(str(k), "/") {
				abs[k] = str(k)
			}
		}
		return files, abs
	}
	m := grpoDirRe.FindSubmatch(sh) // grpo.sh: $GRPO_DIR/…, and the absolute overrides
	if m == nil {
		t.Fatalf("%s names neither a LLaMA-Factory YAML nor GRPO_DIR:\n%s", script, sh)
	}
	abs["GRPO_DIR"] = string(m[1])
	for _, f := range grpoFileRe.FindAllSubmatch(sh, -1) {
		if !slices.Contains(files, string(f[1])) {
			files = append(files, string(f[1]))
		}
	}
	for _, o := range absOptionRe.FindAllSubmatch(sh, -1) {
		abs[string(o[1])] = string(o[2])
	}
	return files, abs
}

func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// checkJob checks a stage's job.yaml against the files the stage wrote: every
// file the script reads reaches the stage directory (from the ConfigMap, or on
// the claim, checked by the init container), and every path the files name is
// under a mount of the training container.
func checkJob(t *testing.T, dir, script string) stageManifests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJobYAML(t, b)
	spec := m.job.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 1 {
		t.Fatalf("containers %d, init containers %d", len(spec.Containers), len(spec.InitContainers))
	}
	c, ic := spec.Containers[0], spec.InitContainers[0]
	if bl := m.job.Spec.BackoffLimit; bl == nil || *bl < 1 {
		t.Errorf("backoffLimit %v: a lost node should not end the run", bl)
	}
	if g := c.Resources.Limits.Name("nvidia.com/gpu", ""); g.Value() < 1 || !g.Equal(*c.Resources.Requests.Name("nvidia.com/gpu", "")) {
		t.Errorf("GPUs: limits %v requests %v", c.Resources.Limits, c.Resources.Requests)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || m.job.Spec.PodFailurePolicy == nil {
		t.Errorf("restartPolicy %q, podFailurePolicy %v", spec.RestartPolicy, m.job.Spec.PodFailurePolicy)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, cont := range []corev1.Container{c, ic} {
		for _, vm := range cont.VolumeMounts {
			if _, ok := vols[vm.Name]; !ok {
				t.Errorf("%s mounts %q, which is not a volume", cont.Name, vm.Name)
			}
		}
	}
	absDir, _ := filepath.Abs(dir)
	stage := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == absDir })
	if stage < 0 {
		t.Fatalf("no mount of the stage directory %s: %+v", absDir, c.VolumeMounts)
	}
	if c.Command[len(c.Command)-1] != path.Join(absDir, script) || c.WorkingDir != absDir {
		t.Errorf("command %q in %s", c.Command, c.WorkingDir)
	}
	if !slices.ContainsFunc(ic.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm == c.VolumeMounts[stage] }) {
		t.Errorf("the init container does not mount the stage directory as the trainer does: %+v", ic.VolumeMounts)
	}
	if !slices.Contains(ic.Env, corev1.EnvVar{Name: "STAGE_DIR", Value: absDir}) {
		t.Errorf("init env %+v", ic.Env)
	}

	files, abs := referenced(t, dir, script)
	carried := map[string]bool{}
	if m.cm != nil {
		v, ok := vols["files"]
		if !ok || v.ConfigMap == nil || v.ConfigMap.Name != m.cm.Name {
			t.Fatalf("the ConfigMap %s is not a volume: %+v", m.cm.Name, spec.Volumes)
		}
		for _, it := range v.ConfigMap.Items {
			want, err := os.ReadFile(filepath.Join(dir, it.Path))
			if err != nil {
				t.Errorf("ConfigMap item %s: %v", it.Path, err)
				continue
			}
			got, ok := m.cm.Data[it.Key]
			if !ok {
				got = string(m.cm.BinaryData[it.Key])
			}
			if got != string(want) {
				t.Errorf("ConfigMap key %s is not %s as written (%d bytes, want %d)", it.Key, it.Path, len(got), len(want))
			}
			if !slices.Contains(ic.Command, it.Path) {
				t.Errorf("the init container does not copy %s: %q", it.Path, ic.Command)
			}
			carried[it.Path] = true
		}
	} else {
		for _, a := range ic.Command[4:] { // sh -c SCRIPT $0 then path:size
			name, _, _ := strings.Cut(a, ":")
			carried[name] = true
		}
		if vols[c.VolumeMounts[stage].Name].PersistentVolumeClaim == nil {
			t.Errorf("files on no claim: %+v", vols)
		}
	}
	for _, f := range files {
		if !carried[f] {
			t.Errorf("%s reads %s, which the Job does not carry (%v)", script, f, carried)
		}
	}
	for k, p := range abs {
		if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return under(p, vm.MountPath) }) {
			t.Errorf("%s %s is under no mount of the Job: %+v", k, p, c.VolumeMounts)
		}
	}
	return m
}

// hfModel makes a directory that passes for a Hugging Face checkpoint.
func hfModel(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kubeExamples(n, size int) []Example {
	var exs []Example
	for i := range n {
		exs = append(exs, Example{TaskID: fmt.Sprint("t", i), Task: fmt.Sprint("task ", i, " ", strings.Repeat("x", size)), Guidance: "do it"})
	}
	return exs
}

func kubePairs(n int) []Pair {
	var pairs []Pair
	for i := range n {
		pairs = append(pairs, Pair{TaskID: fmt.Sprint("t", i), Task: fmt.Sprint("task ", i), Chosen: "good", Rejected: "bad"})
	}
	return pairs
}

// TestStageJobsStart: each stage's job.yaml carries the files its script reads
// and mounts every path they name, so that kubectl apply starts it on a cluster
// that has never seen --out.
func TestStageJobsStart(t *testing.T) {
	model := hfModel(t)
	for _, c := range []struct {
		name, script string
		write        func(dir string) (*Written, error)
		wantModel    bool
	}{
		{"sft", "run.sh", func(dir string) (*Written, error) {
			return WriteSFT(kubeExamples(10, 0), LFOptions{Out: dir, Prompter: fixedPrompt{"sys"}, Val: 0.2, Recipe: DefaultSFTRecipe()})
		}, false},
		{"sft from a local model", "run.sh", func(dir string) (*Written, error) {
			r := DefaultSFTRecipe()
			r.Model, r.PVC = model, "train"
			return WriteSFT(kubeExamples(10, 0), LFOptions{Out: dir, Prompter: fixedPrompt{"sys"}, Val: 0.2, Recipe: r, JobPath: "runs/sft",
				Kube: KubeOptions{ModelPVC: "models", ModelSubPath: "qwen3"}})
		}, true},
		{"dpo", "run.sh", func(dir string) (*Written, error) {
			r := DefaultDPORecipe()
			r.Model = model
			return WriteDPO(kubePairs(10), LFOptions{Out: dir, Prompter: fixedPrompt{"sys"}, Val: 0.2, Recipe: r, Kube: KubeOptions{ModelPVC: "train", ModelSubPath: "sft/saves/cam-sft"}})
		}, true},
		{"grpo", "grpo.sh", func(dir string) (*Written, error) {
			o := DefaultGRPOOptions()
			o.Out, o.Prompter, o.Val, o.Model = dir, fixedPrompt{"sys"}, 0.2, model
			o.Kube = KubeOptions{Image: DefaultGRPOImage, Name: "camproxy-cam-grpo", PVC: "train", ModelPVC: "train", ModelSubPath: "sft/saves/cam-sft"}
			return WriteGRPO(kubeExamples(20, 0), o)
		}, true},
		{"sft too large for a ConfigMap", "run.sh", func(dir string) (*Written, error) {
			r := DefaultSFTRecipe()
			r.PVC = "train"
			return WriteSFT(kubeExamples(40, 32<<10), LFOptions{Out: dir, Prompter: fixedPrompt{"sys"}, Val: 0.2, Recipe: r, JobPath: "sft"})
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := c.write(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(w.Files, "job.yaml") {
				t.Fatalf("no job.yaml: %v", w.Warnings)
			}
			m := checkJob(t, dir, c.script)
			spec := m.job.Spec.Template.Spec
			hasModel := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "model" })
			if hasModel != c.wantModel {
				t.Errorf("model volume %v, want %v", hasModel, c.wantModel)
			}
			if strings.Contains(c.name, "too large") {
				if m.cm != nil || spec.InitContainers[0].Name != "check-files" {
					t.Errorf("a ConfigMap for files over 1 MiB")
				}
			} else if m.cm == nil {
				t.Errorf("small files without a ConfigMap")
			}
		})
	}
}

// TestStageJobRefusals: a Job that could not start is not written, and the
// stage says why.
func TestStageJobRefusals(t *testing.T) {
	model := hfModel(t)
	for name, c := range map[string]struct {
		o    LFOptions
		exs  []Example
		want string
	}{
		"local model without its claim": {LFOptions{Recipe: func() Recipe { r := DefaultSFTRecipe(); r.Model = model; return r }()}, kubeExamples(4, 0), "--model-pvc"},
		"too large without a claim":     {LFOptions{Recipe: DefaultSFTRecipe()}, kubeExamples(40, 32<<10), "too large for a ConfigMap"},
		"bad job name":                  {LFOptions{Recipe: func() Recipe { r := DefaultSFTRecipe(); r.RunName = "Cam_SFT"; return r }()}, kubeExamples(4, 0), "job name"},
		"checkpoints outside --out":     {LFOptions{Recipe: func() Recipe { r := DefaultSFTRecipe(); r.OutputDir = t.TempDir(); return r }()}, kubeExamples(4, 0), "outside"},
	} {
		t.Run(name, func(t *testing.T) {
			c.o.Out, c.o.Prompter = t.TempDir(), fixedPrompt{}
			w, err := WriteSFT(c.exs, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(w.Files, "job.yaml") || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], c.want) {
				t.Fatalf("files %v, warnings %q, want one saying %q", w.Files, w.Warnings, c.want)
			}
		})
	}
	// Several GRPO nodes save shards to one directory: a shared claim is required.
	o := DefaultGRPOOptions()
	o.Out, o.Prompter, o.Model, o.Nodes, o.Kube = t.TempDir(), fixedPrompt{}, model, 2, KubeOptions{Image: DefaultGRPOImage, Name: "g", ModelPVC: "m"}
	w, err := WriteGRPO(kubeExamples(20, 0), o)
	if err != nil || slices.ContainsFunc(w.Files, func(f string) bool { return strings.HasSuffix(f, "job.yaml") }) ||
		!slices.ContainsFunc(w.Warnings, func(s string) bool { return strings.Contains(s, "ReadWriteMany claim (--pvc)") }) {
		t.Fatalf("--nodes 2 without --pvc: %v %v %q", err, w.Files, w.Warnings)
	}
}

// TestGRPORayJob: GRPO on several nodes is a KubeRay RayJob whose head and workers
// all carry the files and mount the shared stage directory, with only the fields
// KubeRay v1.5.1's CRD declares.
func TestGRPORayJob(t *testing.T) {
	o := DefaultGRPOOptions()
	o.Out, o.Prompter, o.Model, o.Nodes, o.GPUs = t.TempDir(), fixedPrompt{"sys"}, hfModel(t), 3, 4
	o.TP = 4
	o.Kube = KubeOptions{Image: DefaultGRPOImage, Name: "cam-grpo", PVC: "shared", SubPath: "grpo", ModelPVC: "shared", ModelSubPath: "sft/saves/cam-sft"}
	w, err := WriteGRPO(kubeExamples(20, 0), o)
	if err != nil || !slices.Contains(w.Files, "rayjob.yaml") || slices.Contains(w.Files, "job.yaml") {
		t.Fatalf("%v %v %q", err, w.Files, w.Warnings)
	}
	b, _ := os.ReadFile(filepath.Join(o.Out, "rayjob.yaml"))
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the ConfigMap and the RayJob", len(docs))
	}
	var rj rayJob
	if err := sigsyaml.UnmarshalStrict(docs[1], &rj); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := sigsyaml.Unmarshal(docs[1], &raw); err != nil {
		t.Fatal(err)
	}
	known, err := os.ReadFile(filepath.Join("testdata", "fakegpu", "kuberay-1.5.1-rayjob.keys"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				p := prefix + "." + k
				if !bytes.Contains(known, []byte("\n"+p+"\n")) && prefix != "spec.rayClusterSpec.headGroupSpec.rayStartParams" {
					t.Errorf("%s is not a field of KubeRay's RayJob", p)
				}
				if k != "template" {
					walk(p, c)
				}
			}
		case []any:
			for _, c := range v {
				walk(prefix+"[]", c)
			}
		}
	}
	walk("spec", raw["spec"])
	if rj.APIVersion != "ray.io/v1" || rj.Kind != "RayJob" || rj.Spec.Entrypoint != "bash "+filepath.ToSlash(filepath.Join(o.Out, "grpo.sh")) || !rj.Spec.ShutdownAfterJobFinishes {
		t.Fatalf("rayjob: %+v", rj.Spec)
	}
	wg := rj.Spec.RayClusterSpec.WorkerGroupSpecs
	if len(wg) != 1 || *wg[0].Replicas != 2 || *wg[0].MinReplicas != 2 || *wg[0].MaxReplicas != 2 {
		t.Fatalf("workers: %+v", wg)
	}
	for _, pod := range []corev1.PodTemplateSpec{rj.Spec.RayClusterSpec.HeadGroupSpec.Template, wg[0].Template} {
		c := pod.Spec.Containers[0]
		if len(pod.Spec.InitContainers) != 1 || c.Command != nil || c.Resources.Limits.Name("nvidia.com/gpu", "").Value() != 4 ||
			!slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == o.Out && vm.SubPath == "grpo" }) ||
			!slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "cam-grpo-files" }) {
			t.Errorf("pod %s: %+v", c.Name, pod.Spec)
		}
	}
}

func TestCMKey(t *testing.T) {
	for in, want := range map[string]string{"run.sh": "run.sh", "data/dataset_info.json": "data__dataset_info.json", "a b/ü.json": "a_b___.json"} {
		if got := cmKey(in); got != want {
			t.Errorf("cmKey(%q) = %q, want %q", in, got, want)
		}
	}
}
