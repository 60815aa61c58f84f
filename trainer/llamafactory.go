package trainer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// LLaMA-Factory reads a dataset through an entry of dataset_info.json that names its
// file, its formatting and which record keys hold which part of the conversation
// (https://github.com/hiyouga/LLaMA-Factory/blob/main/data/README.md). camproxy
// writes alpaca records: instruction = the CAM's user prompt, system = its system
// prompt, output = the target context (SFT) or chosen/rejected (ranking, DPO).

// alpacaSFT is one supervised record.
type alpacaSFT struct {
	Instruction string `json:"instruction"`
	Input       string `json:"input"`
	Output      string `json:"output"`
	System      string `json:"system,omitempty"`
}

// alpacaPair is one preference record (ranking: true).
type alpacaPair struct {
	Instruction string `json:"instruction"`
	Input       string `json:"input"`
	Chosen      string `json:"chosen"`
	Rejected    string `json:"rejected"`
	System      string `json:"system,omitempty"`
}

// DatasetInfo is one dataset_info.json entry.
type DatasetInfo struct {
	FileName   string            `json:"file_name"`
	Formatting string            `json:"formatting"`
	Ranking    bool              `json:"ranking,omitempty"`
	Columns    map[string]string `json:"columns"`
}

// datasetDir is where the data files and dataset_info.json go, under --out.
const datasetDir = "data"

func sftDatasetInfo(file string, system bool) DatasetInfo {
	cols := map[string]string{"prompt": "instruction", "query": "input", "response": "output"}
	if system {
		cols["system"] = "system"
	}
	return DatasetInfo{FileName: file, Formatting: "alpaca", Columns: cols}
}

func rankingDatasetInfo(file string, system bool) DatasetInfo {
	cols := map[string]string{"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
	if system {
		cols["system"] = "system"
	}
	return DatasetInfo{FileName: file, Formatting: "alpaca", Ranking: true, Columns: cols}
}

// Recipe is the LLaMA-Factory training recipe written to sft.yaml or dpo.yaml.
// The SFT defaults are the CLEAR paper's: Qwen3-32B, full fine-tuning in bf16 for 5
// epochs with 5% warm-up, the qwen3 template, DeepSpeed ZeRO-3.
type Recipe struct {
	Model       string  // model_name_or_path: "hub:ORG/NAME" or a checkpoint directory (see ResolveModel)
	Template    string  // LLaMA-Factory chat template
	Thinking    *bool   // enable_thinking of a reasoning template: the serving chat_template_kwargs' (nil = unset)
	Finetuning  string  // full | lora | freeze
	Epochs      float64 // num_train_epochs
	LR          float64 // learning_rate
	Warmup      float64 // warmup_ratio
	CutoffLen   int     // tokens per example
	BatchSize   int     // per_device_train_batch_size
	GradAccum   int     // gradient_accumulation_steps
	DeepSpeed   string  // "z3" (ZeRO-3), "z2", or "" (none)
	OutputDir   string  // checkpoints, relative to --out unless absolute; written absolute
	PrefBeta    float64 // DPO only
	PrefLoss    string  // DPO only: sigmoid | orpo | simpo
	GPUs        int     // GPUs per node: the Job's nvidia.com/gpu request
	Image       string  // the Job's container image, with LLaMA-Factory installed
	PVC         string  // the claim holding --out in the Job; "" = an emptyDir (for a try)
	Namespace   string  // the Job's namespace; "" = the kubectl context's
	RunName     string  // names the Job
	ReportTo    string  // none | wandb | tensorboard
	FlashAttn   string  // auto | fa2 | sdpa | disabled
	SaveSteps   int     // 0 = save each epoch
	LoggingStep int
}

// DefaultSFTRecipe is the paper's recipe.
func DefaultSFTRecipe() Recipe {
	return Recipe{
		Model: HubPrefix + "Qwen/Qwen3-32B", Template: "qwen3", Finetuning: "full", Epochs: 5, LR: 1e-5,
		Warmup: 0.05, CutoffLen: 8192, BatchSize: 1, GradAccum: 8, DeepSpeed: "z3", OutputDir: SFTCheckpoint,
		GPUs: 8, Image: "hiyouga/llamafactory:0.9.4", RunName: "camproxy-cam-sft", ReportTo: "none",
		FlashAttn: "auto", LoggingStep: 10,
	}
}

// DefaultDPORecipe starts from the SFT checkpoint (DefaultSFTModel) and runs the
// sigmoid (DPO) loss.
func DefaultDPORecipe() Recipe {
	r := DefaultSFTRecipe()
	r.Model, r.Epochs, r.LR, r.OutputDir, r.RunName = DefaultSFTModel, 2, 5e-7, "saves/cam-dpo", "camproxy-cam-dpo"
	r.PrefBeta, r.PrefLoss = 0.1, "sigmoid"
	return r
}

// Validate reports every problem of the recipe at once.
func (r Recipe) Validate(stage string) error {
	var p []string
	if r.Model == "" {
		p = append(p, "the model is empty")
	}
	if r.Template == "" {
		p = append(p, "the template is empty")
	}
	if msg := r.checkTemplate(); msg != "" {
		p = append(p, msg)
	}
	switch r.Finetuning {
	case "full", "lora", "freeze":
	default:
		p = append(p, fmt.Sprintf("finetuning %q: want full, lora or freeze", r.Finetuning))
	}
	switch r.DeepSpeed {
	case "", "none", "z2", "z3":
	default:
		p = append(p, fmt.Sprintf("deepspeed %q: want z3, z2 or none", r.DeepSpeed))
	}
	if r.Epochs <= 0 {
		p = append(p, fmt.Sprintf("epochs %g: want > 0", r.Epochs))
	}
	if r.LR <= 0 {
		p = append(p, fmt.Sprintf("learning rate %g: want > 0", r.LR))
	}
	if r.Warmup < 0 || r.Warmup >= 1 {
		p = append(p, fmt.Sprintf("warmup ratio %g: want 0 to <1", r.Warmup))
	}
	if r.CutoffLen < 16 || r.BatchSize < 1 || r.GradAccum < 1 {
		p = append(p, "cutoff-len ≥ 16, batch-size ≥ 1 and grad-accum ≥ 1 are required")
	}
	if r.GPUs < 1 {
		p = append(p, fmt.Sprintf("gpus %d: want 1 or more", r.GPUs))
	}
	if r.OutputDir == "" {
		p = append(p, "the output (checkpoint) directory is empty")
	}
	if stage == "dpo" {
		if r.PrefBeta <= 0 {
			p = append(p, fmt.Sprintf("pref-beta %g: want > 0", r.PrefBeta))
		}
		switch r.PrefLoss {
		case "sigmoid", "orpo", "simpo", "hinge", "ipo":
		default:
			p = append(p, fmt.Sprintf("pref-loss %q: want sigmoid, orpo, simpo, hinge or ipo", r.PrefLoss))
		}
	}
	if len(p) > 0 {
		return fmt.Errorf("%s recipe: %s", stage, strings.Join(p, "; "))
	}
	return nil
}

// yamlDoc is an ordered YAML mapping with section comments: LLaMA-Factory users
// read and edit these files, so the order of its own examples is kept.
type yamlDoc struct {
	b strings.Builder
}

func (d *yamlDoc) section(name string) {
	if d.b.Len() > 0 {
		d.b.WriteByte('\n')
	}
	fmt.Fprintf(&d.b, "### %s\n", name)
}

func (d *yamlDoc) kv(key string, v any) {
	var s string
	switch v := v.(type) {
	case string:
		b, _ := json.Marshal(v) // a JSON string is a YAML double-quoted scalar
		s = string(b)
	case float64:
		s = yamlFloat(v)
	case int:
		s = strconv.Itoa(v)
	case bool:
		s = strconv.FormatBool(v)
	default:
		panic(fmt.Sprintf("yamlDoc: %T", v))
	}
	fmt.Fprintf(&d.b, "%s: %s\n", key, s)
}

// yamlFloat writes a float that YAML 1.1 readers (PyYAML, which LLaMA-Factory
// uses) read as a float: "1e-05" is a string there, "1.0e-05" a float.
func yamlFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	mant, exp, hasExp := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	if hasExp {
		return mant + "e" + exp
	}
	return mant
}

// llamaFactoryYAML renders the training config. stage is sft or dpo; train and val
// are dataset names in dataset_info.json (val "" = no evaluation).
func llamaFactoryYAML(stage string, r Recipe, train, val string, system bool) string {
	var d yamlDoc
	fmt.Fprintf(&d.b, "# LLaMA-Factory %s config written by camproxy train %s. Run: llamafactory-cli train %s.yaml\n", stage, stage, stage)
	d.section("model")
	d.kv("model_name_or_path", r.Model)
	d.kv("trust_remote_code", true)
	if r.FlashAttn != "" {
		d.kv("flash_attn", r.FlashAttn)
	}
	d.section("method")
	d.kv("stage", stage)
	d.kv("do_train", true)
	d.kv("finetuning_type", r.Finetuning)
	if r.Finetuning == "lora" {
		d.kv("lora_rank", 16)
		d.kv("lora_target", "all")
	}
	if r.DeepSpeed != "" && r.DeepSpeed != "none" {
		d.kv("deepspeed", deepSpeedFile(r.DeepSpeed))
	}
	if stage == "dpo" {
		d.kv("pref_beta", r.PrefBeta)
		d.kv("pref_loss", r.PrefLoss)
	}
	d.section("dataset")
	d.kv("dataset_dir", datasetDir)
	d.kv("dataset", train)
	if val != "" {
		d.kv("eval_dataset", val)
	}
	d.kv("template", r.Template)
	if r.Thinking != nil {
		d.kv("enable_thinking", *r.Thinking) // read by reasoning templates (ReasoningTemplate) only
	}
	d.kv("cutoff_len", r.CutoffLen)
	d.kv("overwrite_cache", true)
	d.kv("preprocessing_num_workers", 16)
	d.section("output")
	d.kv("output_dir", r.OutputDir)
	d.kv("logging_steps", r.LoggingStep)
	if r.SaveSteps > 0 {
		d.kv("save_strategy", "steps")
		d.kv("save_steps", r.SaveSteps)
	} else {
		d.kv("save_strategy", "epoch")
	}
	d.kv("plot_loss", true)
	d.kv("overwrite_output_dir", true)
	d.kv("save_only_model", false)
	d.kv("report_to", r.ReportTo)
	d.section("train")
	d.kv("per_device_train_batch_size", r.BatchSize)
	d.kv("gradient_accumulation_steps", r.GradAccum)
	d.kv("learning_rate", r.LR)
	d.kv("num_train_epochs", r.Epochs)
	d.kv("lr_scheduler_type", "cosine")
	d.kv("warmup_ratio", r.Warmup)
	d.kv("bf16", true)
	d.kv("ddp_timeout", 180000000)
	if val != "" {
		d.section("eval")
		d.kv("per_device_eval_batch_size", 1)
		d.kv("eval_strategy", "epoch")
	}
	return d.b.String()
}

func deepSpeedFile(level string) string { return "ds_" + level + "_config.json" }

// deepSpeedConfig is a DeepSpeed ZeRO config whose sizes are "auto": the HF Trainer
// fills them from the training arguments.
func deepSpeedConfig(level string) []byte {
	zero := map[string]any{
		"stage": 2, "allgather_partitions": true, "allgather_bucket_size": 5e8, "overlap_comm": false,
		"reduce_scatter": true, "reduce_bucket_size": 5e8, "contiguous_gradients": true, "round_robin_gradients": true,
	}
	if level == "z3" {
		zero = map[string]any{
			"stage": 3, "overlap_comm": false, "contiguous_gradients": true, "sub_group_size": 1e9,
			"reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
			"stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true,
		}
	}
	b, _ := marshalJSON(map[string]any{
		"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
		"gradient_clipping": "auto", "zero_allow_untested_optimizer": true,
		"fp16":              map[string]any{"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
		"bf16":              map[string]any{"enabled": "auto"},
		"zero_optimization": zero,
	})
	return b
}

// runScript is the run.sh of a LLaMA-Factory stage: it runs from its own directory,
// so the relative paths in the YAML hold wherever --out is mounted.
func runScript(stage string) string {
	return fmt.Sprintf(`#!/usr/bin/env bash
# Written by camproxy train %[1]s: trains the CAM with LLaMA-Factory.
# One node: bash run.sh. Several: set NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v llamafactory-cli >/dev/null 2>&1; then
  echo "run.sh: llamafactory-cli is not installed: pip install 'llamafactory[torch,metrics,deepspeed]' (see https://github.com/hiyouga/LLaMA-Factory)" >&2
  exit 127
fi
# FORCE_TORCHRUN starts one process per GPU, which DeepSpeed needs.
export FORCE_TORCHRUN="${FORCE_TORCHRUN:-1}"
exec llamafactory-cli train %[1]s.yaml "$@"
`, stage)
}
