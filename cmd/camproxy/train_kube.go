package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/trainer"
)

// kubeFlags registers what a stage's job.yaml needs beyond the recipe: the claim
// holding a local starting model and the retries; for GRPO, whose options hold no
// Kubernetes recipe, the image, claim and names too.
func kubeFlags(f *pflag.FlagSet, k *trainer.KubeOptions, grpo bool) {
	f.StringVar(&k.ModelPVC, "model-pvc", k.ModelPVC, "job.yaml: the PersistentVolumeClaim holding a local --model (mounted read-only at the model's path)")
	f.StringVar(&k.ModelSubPath, "model-subpath", k.ModelSubPath, "job.yaml: the model's path inside --model-pvc (default its root)")
	f.Var((*backoffLimit)(&k.BackoffLimit), "backoff-limit", "job.yaml: retries of a pod lost to a node failure or preemption (0 = none)")
	if !grpo {
		return
	}
	k.Image, k.Name = trainer.DefaultGRPOImage, "camproxy-cam-grpo"
	f.StringVar(&k.Image, "image", k.Image, "job.yaml: the container image, with veRL and vLLM")
	f.StringVar(&k.PVC, "pvc", k.PVC, "job.yaml: the PersistentVolumeClaim holding --out (default an emptyDir: checkpoints go with the pod)")
	f.StringVar(&k.SubPath, "job-path", k.SubPath, "job.yaml: --out's path inside the --pvc claim (default its root)")
	f.StringVar(&k.Namespace, "namespace", k.Namespace, "job.yaml: the namespace")
	f.StringVar(&k.Name, "job-name", k.Name, "job.yaml: the Job's name")
}

// backoffLimit is --backoff-limit: KubeOptions' zero means the default (2), so 0
// retries is kept as -1.
type backoffLimit int32

func (b *backoffLimit) Type() string { return "int" }

func (b *backoffLimit) String() string {
	switch {
	case *b == 0:
		return "2"
	case *b < 0:
		return "0"
	}
	return strconv.Itoa(int(*b))
}

func (b *backoffLimit) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("want 0 or more")
	}
	*b = backoffLimit(n)
	if n == 0 {
		*b = -1
	}
	return nil
}
