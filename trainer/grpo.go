package trainer

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
)

//go:embed verl/reward.py
var rewardPy string

// GRPOOptions configures WriteGRPO. The defaults (DefaultGRPOOptions) are the CLEAR
// paper's: 15 epochs of GRPO on the SFT checkpoint, vLLM rollouts.
type GRPOOptions struct {
	Out            string
	Prompter       Prompter
	Val            float64
	Seed           int64
	Model          string             // the actor: the SFT checkpoint, "hub:ORG/NAME" or a directory (ResolveModel)
	DataSource     string             // data_source of every row
	Ability        string             // ability of every row
	RolloutURL     string             // camproxy's admin base URL, as reward.py reaches it
	RolloutTimeout time.Duration      // one agent run, from the moment it has a slot
	QueueTimeout   time.Duration      // waiting for one of camproxy's rollouts.max_in_flight slots; 0 = camproxy's rollouts.queue_timeout
	EmptyReward    float64            // the reward of a response with no context left (a <think> cut off by the length limit)
	RewardManager  string             // auto (by the installed veRL), loop (veRL ≥ 0.7's reward loop) or batch (veRL < 0.7)
	ChatTemplate   ChatTemplateKwargs // the serving cam augmenter's chat_template_kwargs: data.apply_chat_template_kwargs
	CheckpointDir  string             // trainer.default_local_dir; "" = checkpoints/PROJECT/EXPERIMENT under Out; written absolute
	N              int                // rollout.n: contexts sampled per task
	Epochs         int
	BatchSize      int // tasks per step; 0 = a divisor of the train tasks up to 32 (see batchSize)
	LR             float64
	GPUs, Nodes    int
	TP             int // vLLM tensor parallel size
	MaxPromptLen   int
	MaxResponseLen int
	Project        string      // trainer.project_name
	Experiment     string      // trainer.experiment_name
	RayAddress     string      // the default of $RAY_ADDRESS in grpo-ray.sh
	Kube           KubeOptions // job.yaml: image, claims, retries (GPUs are GPUs)
}

// DefaultGRPOOptions are the defaults of camproxy train grpo's flags.
func DefaultGRPOOptions() GRPOOptions {
	return GRPOOptions{
		DataSource: "camproxy", Ability: "context", RolloutURL: "http://127.0.0.1:9090", RolloutTimeout: 10 * time.Minute,
		QueueTimeout: time.Hour, RewardManager: "auto", N: 8, Epochs: 15, LR: 1e-6, GPUs: 8, Nodes: 1, TP: 4, MaxPromptLen: 4096,
		MaxResponseLen: 1024, Project: "camproxy", Experiment: "cam-grpo", RayAddress: "http://127.0.0.1:8265",
	}
}

// Validate reports every problem at once.
func (o GRPOOptions) Validate() error {
	var p []string
	if o.Model == "" {
		p = append(p, "the model (the SFT checkpoint) is required")
	}
	if o.QueueTimeout < 0 || o.QueueTimeout > maxQueueTimeout {
		p = append(p, fmt.Sprintf("queue timeout %v: want 0 (camproxy's rollouts.queue_timeout) up to %v", o.QueueTimeout, maxQueueTimeout))
	}
	if _, err := o.ChatTemplate.Hydra(); err != nil {
		p = append(p, err.Error())
	}
	if u, err := url.Parse(o.RolloutURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p = append(p, fmt.Sprintf("rollout URL %q: want http(s)://HOST:PORT of camproxy's admin plane", o.RolloutURL))
	}
	if o.RolloutTimeout < time.Second {
		p = append(p, fmt.Sprintf("rollout timeout %v: want 1s or more", o.RolloutTimeout))
	}
	if o.RewardManager != "auto" && o.RewardManager != "loop" && o.RewardManager != "batch" {
		p = append(p, fmt.Sprintf("reward manager %q: want auto, loop or batch", o.RewardManager))
	}
	if o.N < 2 {
		p = append(p, fmt.Sprintf("n %d: GRPO compares a group of responses, want 2 or more", o.N))
	}
	if o.Epochs < 1 || o.GPUs < 1 || o.Nodes < 1 || o.TP < 1 || o.BatchSize < 0 {
		p = append(p, "epochs, gpus, nodes and tp must be 1 or more, batch-size 0 (auto) or more")
	}
	if o.TP > o.GPUs || o.GPUs%o.TP != 0 {
		p = append(p, fmt.Sprintf("tp %d must divide gpus %d", o.TP, o.GPUs))
	}
	if o.LR <= 0 || o.MaxPromptLen < 16 || o.MaxResponseLen < 16 {
		p = append(p, "lr must be > 0, max prompt and response lengths 16 or more")
	}
	if o.DataSource == "" {
		p = append(p, "data source is empty")
	}
	if len(p) > 0 {
		return fmt.Errorf("grpo: %s", strings.Join(p, "; "))
	}
	return nil
}

// verlRow is one row of veRL's RL dataset (verl.utils.dataset.RLHFDataset): the
// chat prompt, and what the reward function gets back as ground_truth/extra_info.
type verlRow struct {
	DataSource  string        `parquet:"data_source"`
	Prompt      []verlMessage `parquet:"prompt,list"`
	Ability     string        `parquet:"ability"`
	RewardModel verlReward    `parquet:"reward_model"`
	ExtraInfo   verlExtra     `parquet:"extra_info"`
}

type verlMessage struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

type verlReward struct {
	Style       string `parquet:"style"`
	GroundTruth string `parquet:"ground_truth"` // the task id: reward.py sends it to the rollout API
}

type verlExtra struct {
	TaskID string `parquet:"task_id"`
	Task   string `parquet:"task"`
	Index  int64  `parquet:"index"`
	Split  string `parquet:"split"`
}

func verlRows(exs []Example, p Prompter, o GRPOOptions, split string) []verlRow {
	rows := make([]verlRow, 0, len(exs))
	for i, e := range exs {
		sys, user := p.Prompt(e.Task)
		var msgs []verlMessage
		if sys != "" {
			msgs = append(msgs, verlMessage{Role: "system", Content: sys})
		}
		msgs = append(msgs, verlMessage{Role: "user", Content: user})
		rows = append(rows, verlRow{
			DataSource: o.DataSource, Prompt: msgs, Ability: o.Ability,
			RewardModel: verlReward{Style: "rule", GroundTruth: e.TaskID},
			ExtraInfo:   verlExtra{TaskID: e.TaskID, Task: e.Task, Index: int64(i), Split: split},
		})
	}
	return rows
}

func encodeParquet(rows []verlRow) ([]byte, error) {
	var buf bytes.Buffer
	// Snappy: what pandas and pyarrow write by default, readable everywhere.
	w := parquet.NewGenericWriter[verlRow](&buf, parquet.Compression(&parquet.Snappy))
	if _, err := w.Write(rows); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteGRPO writes veRL's GRPO inputs for the tasks of exs (each task once) into
// o.Out: train.parquet, val.parquet, reward.py, grpo.sh and grpo-ray.sh.
func WriteGRPO(exs []Example, o GRPOOptions) (*Written, error) {
	exs = UniqueTasks(exs)
	if len(exs) == 0 {
		return nil, ErrNoData
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := o.resolve(); err != nil {
		return nil, err
	}
	if err := prepareOut(o.Out); err != nil {
		return nil, err
	}
	s := SplitExamples(exs, o.Val, o.Seed)
	w := &Written{Dir: o.Out, Train: len(s.Train), Val: len(s.Val), TrainTasks: len(s.Train), ValTasks: len(s.Val)}
	if o.BatchSize == 0 {
		o.BatchSize = batchSize(len(s.Train))
	}
	if o.BatchSize > len(s.Train) {
		return nil, fmt.Errorf("grpo: batch size %d is more than the %d training tasks: veRL would train on nothing", o.BatchSize, len(s.Train))
	}
	if left := len(s.Train) % o.BatchSize; left != 0 {
		// veRL's train dataloader has drop_last=True (ray_trainer.py).
		w.Warnings = append(w.Warnings, fmt.Sprintf("%d training tasks in batches of %d: veRL drops the last %d every epoch (%d steps an epoch); "+
			"a --batch-size that divides %d trains on every task", len(s.Train), o.BatchSize, left, len(s.Train)/o.BatchSize, len(s.Train)))
	}
	w.BatchSize = o.BatchSize
	out := &fileSet{dir: o.Out}
	for _, part := range []struct {
		name string
		exs  []Example
	}{{"train", s.Train}, {"val", s.Val}} {
		if len(part.exs) == 0 {
			continue
		}
		data, err := encodeParquet(verlRows(part.exs, o.Prompter, o, part.name))
		if err != nil {
			return nil, fmt.Errorf("encode %s.parquet: %w", part.name, err)
		}
		out.write(part.name+".parquet", data, 0o644)
	}
	out.write("reward.py", []byte(renderReward(o)), 0o644)
	out.write("grpo.sh", []byte(grpoScript(o, len(s.Val) > 0)), 0o755)
	out.write("grpo-ray.sh", []byte(grpoRayScript(o)), 0o755)
	w.Warnings = append(w.Warnings, o.writeJob(out)...)
	w.Files = out.files
	w.Command = []string{"bash", "grpo.sh"}
	w.RayCommand = []string{"bash", "grpo-ray.sh"}
	return w, out.err
}

// maxQueueTimeout bounds --queue-timeout as camproxy bounds queue_timeout_s.
const maxQueueTimeout = 24 * time.Hour

// resolve makes every path grpo.sh names absolute and checks the model: grpo.sh
// changes into Out, and under `ray job submit` a relative checkpoint directory
// would be written into Ray's temporary copy of the working directory and lost.
func (o *GRPOOptions) resolve() error {
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return err
	}
	o.Out = out
	if o.Model, err = ResolveModel(o.Model); err != nil {
		return err
	}
	if o.CheckpointDir == "" {
		o.CheckpointDir = filepath.Join("checkpoints", o.Project, o.Experiment)
	}
	o.CheckpointDir, err = absUnder(out, o.CheckpointDir)
	return err
}

// batchSize is the default tasks per step for n training tasks: veRL drops the
// last partial batch of every epoch, so the largest divisor of n up to 32 when
// there is one of at least 16 (40 tasks → 20), else min(32, n) (and a warning).
func batchSize(n int) int {
	for d := min(32, n); d >= 16; d-- {
		if n%d == 0 {
			return d
		}
	}
	return min(32, n)
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func renderReward(o GRPOOptions) string {
	return strings.NewReplacer("{{rollout_url}}", o.RolloutURL,
		"{{timeout_s}}", seconds(o.RolloutTimeout),
		"{{queue_timeout_s}}", seconds(o.QueueTimeout),
		"{{empty_reward}}", strconv.FormatFloat(o.EmptyReward, 'g', -1, 64)).Replace(rewardPy)
}

// verlArgs are main_ppo's Hydra overrides, less the reward wiring (rewardArgs),
// which grpo.sh chooses by the installed veRL. dir prefixes the data and reward
// files: Out locally (veRL workers may run elsewhere than the driver's
// directory), "" under Ray, whose working_dir is uploaded and becomes the current
// directory.
func verlArgs(o GRPOOptions, dir string, val bool) []string {
	valFiles := dir + "train.parquet" // veRL requires val_files; without a split, validate on train
	if val {
		valFiles = dir + "val.parquet"
	}
	mini := o.BatchSize
	args := []string{
		"algorithm.adv_estimator=grpo",
		"algorithm.use_kl_in_reward=False",
		"data.train_files=" + dir + "train.parquet",
		"data.val_files=" + valFiles,
		"data.prompt_key=prompt",
		fmt.Sprintf("data.train_batch_size=%d", o.BatchSize),
		fmt.Sprintf("data.max_prompt_length=%d", o.MaxPromptLen),
		fmt.Sprintf("data.max_response_length=%d", o.MaxResponseLen),
		"data.filter_overlong_prompts=True",
		"data.truncation=error",
		"actor_rollout_ref.model.path=" + o.Model,
		"actor_rollout_ref.model.use_remove_padding=True",
		"actor_rollout_ref.model.enable_gradient_checkpointing=True",
		"actor_rollout_ref.actor.optim.lr=" + strconv.FormatFloat(o.LR, 'g', -1, 64),
		fmt.Sprintf("actor_rollout_ref.actor.ppo_mini_batch_size=%d", mini),
		"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
		"actor_rollout_ref.actor.use_kl_loss=True",
		"actor_rollout_ref.actor.kl_loss_coef=0.001",
		"actor_rollout_ref.actor.kl_loss_type=low_var_kl",
		"actor_rollout_ref.actor.entropy_coeff=0",
		"actor_rollout_ref.actor.fsdp_config.param_offload=True",
		"actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
		"actor_rollout_ref.rollout.name=vllm",
		fmt.Sprintf("actor_rollout_ref.rollout.n=%d", o.N),
		fmt.Sprintf("actor_rollout_ref.rollout.tensor_model_parallel_size=%d", o.TP),
		"actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
		"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
		"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
		"actor_rollout_ref.ref.fsdp_config.param_offload=True",
		"custom_reward_function.path=" + dir + "reward.py",
	}
	if len(o.ChatTemplate) > 0 {
		kw, _ := o.ChatTemplate.Hydra() // checked by Validate
		args = append(args, "data.apply_chat_template_kwargs="+kw)
	}
	return append(args,
		"trainer.default_local_dir="+o.CheckpointDir,
		"trainer.critic_warmup=0",
		`trainer.logger=["console"]`,
		"trainer.project_name="+o.Project,
		"trainer.experiment_name="+o.Experiment,
		fmt.Sprintf("trainer.n_gpus_per_node=%d", o.GPUs),
		fmt.Sprintf("trainer.nnodes=%d", o.Nodes),
		"trainer.save_freq=20",
		"trainer.test_freq=5",
		fmt.Sprintf("trainer.total_epochs=%d", o.Epochs),
	)
}

// shellQuote quotes s for bash when it holds anything but safe characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellArgs renders args one per continued line; a value starting with
// $GRPO_DIR/ is double-quoted so that the shell expands it.
func shellArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString("  ")
		if strings.Contains(a, "=$GRPO_DIR/") {
			k, v, _ := strings.Cut(a, "=")
			b.WriteString(shellQuote(k) + `="` + v + `"`)
		} else {
			b.WriteString(shellQuote(a))
		}
		b.WriteString(" \\\n")
	}
	return b.String()
}

// Reward wiring, by veRL version (read in verl/workers/reward_manager/*.py of
// 0.6.1 and verl/experimental/reward_loop of 0.7.0):
//   - veRL < 0.7 calls the custom function synchronously, one response at a time
//     (naive) or a whole batch at once (batch): an async compute_score would hand
//     back an un-awaited coroutine, so compute_score_batch scores the batch
//     concurrently itself.
//   - veRL ≥ 0.7 runs the reward loop by default (reward_model.use_reward_loop:
//     true), whose managers are naive, dapo, limited and remote only ("Unknown
//     reward manager: batch"); naive awaits an async compute_score, and the loop
//     worker gathers a batch's items, so they run concurrently.
const (
	RewardLoop  = "loop"
	RewardBatch = "batch"
)

// rewardArgs are the Hydra overrides of each wiring.
var rewardArgs = map[string][]string{
	RewardLoop: {"reward_model.reward_manager=naive", "++reward_model.use_reward_loop=True", "custom_reward_function.name=compute_score"},
	// ++…=False keeps veRL ≥ 0.7 on its legacy managers when batch is forced there;
	// older veRL does not read the key.
	RewardBatch: {"reward_model.reward_manager=batch", "++reward_model.use_reward_loop=False", "custom_reward_function.name=compute_score_batch"},
}

// VerlRewardMode is the reward wiring for a veRL version (verl.__version__): loop
// from 0.7 on, a development version such as 0.7.0.dev counting as 0.7; batch
// before. grpo.sh decides the same way (verlModeFunc).
func VerlRewardMode(version string) (string, error) {
	major, rest, _ := strings.Cut(strings.TrimSpace(version), ".")
	minor, _, _ := strings.Cut(rest, ".")
	minor = minor[:len(minor)-len(strings.TrimLeft(minor, "0123456789"))]
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || ma < 0 {
		return "", fmt.Errorf("veRL version %q: want MAJOR.MINOR…", version)
	}
	if ma > 0 || mi >= 7 {
		return RewardLoop, nil
	}
	return RewardBatch, nil
}

// verlModeFunc is VerlRewardMode in bash.
const verlModeFunc = `verl_reward_mode() {
  local major minor rest
  IFS=. read -r major minor rest <<<"$1"
  minor="${minor%%[!0-9]*}"
  [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || return 1
  if (( 10#$major > 0 || 10#$minor >= 7 )); then echo loop; else echo batch; fi
}
`

func bashArray(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return "(" + strings.Join(q, " ") + ")"
}

func grpoScript(o GRPOOptions, val bool) string {
	return fmt.Sprintf(`#!/usr/bin/env bash
# Written by camproxy train grpo: GRPO on the CAM with veRL. The reward of each
# generated context comes from an agent run through camproxy (reward.py).
# The reward wiring follows the installed veRL (CAMPROXY_REWARD_MODE=loop|batch
# forces one): its reward loop from 0.7 on, the batch reward manager before.
set -euo pipefail
cd "$(dirname "$0")"
export CAMPROXY_ROLLOUT_URL="${CAMPROXY_ROLLOUT_URL:-%[1]s}"
# Where train.parquet, val.parquet and reward.py are: here, or "." under Ray.
GRPO_DIR=${CAMPROXY_GRPO_DIR:-%[2]s}
%[3]s
if ! VERL_VERSION="$(python3 -c 'import verl; print(verl.__version__)' 2>/dev/null)"; then
  echo "grpo.sh: python3 cannot import verl: install it with pip install 'verl[vllm]' (see https://verl.readthedocs.io), or run this script where it is" >&2
  exit 127
fi
REWARD_MODE="${CAMPROXY_REWARD_MODE:-%[4]s}"
DETECTED="$(verl_reward_mode "$VERL_VERSION")" || { echo "grpo.sh: cannot read veRL's version $VERL_VERSION; set CAMPROXY_REWARD_MODE=loop (veRL >= 0.7) or batch" >&2; exit 2; }
if [ "$REWARD_MODE" = auto ]; then
  REWARD_MODE="$DETECTED"
elif [ "$REWARD_MODE" != "$DETECTED" ]; then
  echo "grpo.sh: warning: reward mode $REWARD_MODE forced, but veRL $VERL_VERSION takes $DETECTED" >&2
fi
case "$REWARD_MODE" in
  loop) REWARD_ARGS=%[5]s ;;
  batch) REWARD_ARGS=%[6]s ;;
  *) echo "grpo.sh: CAMPROXY_REWARD_MODE=$REWARD_MODE: want auto, loop or batch" >&2; exit 2 ;;
esac
echo "grpo.sh: veRL $VERL_VERSION: reward mode $REWARD_MODE" >&2
exec python3 -m verl.trainer.main_ppo \
%[7]s  "${REWARD_ARGS[@]}" \
  "$@"
`, o.RolloutURL, shellQuote(o.Out), verlModeFunc, o.RewardManager, bashArray(rewardArgs[RewardLoop]), bashArray(rewardArgs[RewardBatch]),
		shellArgs(verlArgs(o, "$GRPO_DIR/", val)))
}

// grpoRayScript submits grpo.sh itself, so that the reward wiring follows the
// veRL installed on the cluster.
func grpoRayScript(o GRPOOptions) string {
	return fmt.Sprintf(`#!/usr/bin/env bash
# Written by camproxy train grpo: the same GRPO run submitted to a Ray cluster. This
# directory is uploaded as the job's working_dir and grpo.sh runs there, choosing
# the reward wiring by the cluster's veRL. CAMPROXY_ROLLOUT_URL must reach
# camproxy's admin plane from the cluster; the model (%[3]s) and the checkpoint
# directory (%[4]s) must be at the same absolute paths there (shared storage).
set -euo pipefail
cd "$(dirname "$0")"
RAY_ADDRESS="${RAY_ADDRESS:-%[1]s}"
CAMPROXY_ROLLOUT_URL="${CAMPROXY_ROLLOUT_URL:-%[2]s}"
CAMPROXY_REWARD_MODE="${CAMPROXY_REWARD_MODE:-}"
if ! command -v ray >/dev/null 2>&1; then
  echo "grpo-ray.sh: the ray CLI is not installed: pip install 'ray[default]'" >&2
  exit 127
fi
exec ray job submit --address "$RAY_ADDRESS" \
  --runtime-env-json "{\"working_dir\": \".\", \"env_vars\": {\"CAMPROXY_ROLLOUT_URL\": \"$CAMPROXY_ROLLOUT_URL\", \"CAMPROXY_GRPO_DIR\": \".\", \"CAMPROXY_REWARD_MODE\": \"$CAMPROXY_REWARD_MODE\"}}" \
  -- bash grpo.sh "$@"
`, o.RayAddress, o.RolloutURL, o.Model, o.CheckpointDir)
}
