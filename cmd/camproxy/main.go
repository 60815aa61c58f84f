// Command camproxy is the CLI: serve the gateway, and (as they land) work with the
// replay buffer and train the CAM. main only wires signals and exit codes; run does the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is bad usage or bad config: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// exitStatus is a launched command that failed: camproxy exits with its status.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "camproxy:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	var es *exitStatus
	if errors.As(err, &es) && es.code > 0 {
		return es.code
	}
	return 1
}

const usage = `camproxy — a gateway that makes LLM agents better without touching their code

Usage:
  camproxy serve [--config FILE]   serve the gateway (FILE defaults to $CAMPROXY_CONFIG, else built-in defaults)
  camproxy replay import --format tau-bench|jsonl FILE [--to URI] [--arm NAME]
                                   copy trajectories or events into a replay buffer
  camproxy replay export [--from URI] --out FILE [--format jsonl|parquet]
                                   one row per episode (--out - writes to stdout)
  camproxy replay stats [--from URI] [--format text|json]
                                   episodes, tasks, rewards and arms of a replay buffer
  camproxy report [--from URI] [--experiment NAME] [--control ARM] [--format text|json|html] [--out FILE]
                                   each arm's reward (95% CI), success, pass@k, turns, time and
                                   context latency, and its lift over the control arm with a p-value
  camproxy train reflect [--from URI] --out FILE --model openai/NAME|bedrock/MODEL_ID [--base-url URL]
                         [--subsets N] [--subset-size N] [--concurrency N] [--dry-run] …
                                   contrastive reflection over several runs of each task: guidance
                                   for a new run, as JSON Lines (train reflect -h lists every flag)
  camproxy train sft --data REFLECT.jsonl --out DIR [--val 0.2] [--launch local] …
                                   LLaMA-Factory SFT files (alpaca data, sft.yaml, run.sh, job.yaml)
  camproxy train grpo --data REFLECT.jsonl|--from URI --out DIR --model SFT_PATH [--launch local|ray] …
                                   veRL GRPO files (parquet, reward.py calling POST /v1/rollouts, grpo.sh)
  camproxy train dpo [--from URI] --out DIR [--launch local] …
                                   preference pairs from runs whose contexts earned different rewards
                                   (train and serve share one CAM prompt: --config/--cam pick it)
  camproxy train playbook --from URI --out DIR --model openai/NAME|bedrock/MODEL_ID [--seed PLAYBOOK]
                          [--iterations N] [--batch-size B] [--rollout-url URL --val 0.2 --group K] [--dry-run] …
                                   RCL's reflect → mutate loop: versioned playbooks (playbook.vN.json,
                                   manifest.json) and the best as playbook.json (train playbook -h lists every flag)
  camproxy train merge --from GRPO_DIR [--step N|latest] --out DIR
                                   veRL's model merger: a GRPO checkpoint (FSDP shards) → a Hugging Face model
  camproxy train serve-config --model DIR [--name NAME] [--config FILE]
                                   the vllm serve command and the cam augmenter + arm for the model, as trained
  camproxy inject serve --listen ADDR [--tls-cert FILE --tls-key FILE] [--image IMAGE] [--arms A,B] …
                                   the Kubernetes sidecar injector (mutating webhook, path /mutate);
                                   without a pair it makes a self-signed one (inject serve -h lists every flag)
  camproxy config check [FILE] [--quiet]
                                   validate a config as serve would and print the effective config,
                                   secrets masked (FILE defaults to $CAMPROXY_CONFIG, else built-in defaults)
  camproxy task explain FILE [--protocol openai|responses|anthropic|bedrock] [--format text|json]
                                   the task rule that matches a request body, its task text and the
                                   task id the proxy records for it (protocol told from the body)
  camproxy dev upstream [--listen 127.0.0.1:8000]
                                   a fake OpenAI-compatible model for trying camproxy without one
  camproxy completion bash|zsh|fish
                                   print the shell completion script (source <(camproxy completion bash))
  camproxy version [--json]        the version, commit, Go version and platform (--version: one line)

Replay URIs: file:///path/dir (default file://./camproxy-data/replay),
  redis://host:6379/0?stream=camproxy:replay, s3://bucket/prefix?region=…&endpoint=…

Exit status: 0 done, 1 failed at run time, 2 bad usage or bad config.`

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return usagef("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, getenv)
	case "replay":
		return replayCmd(ctx, args[1:], stdout, stderr)
	case "report":
		return reportCmd(ctx, args[1:], stdout, stderr)
	case "train":
		return trainCmd(ctx, args[1:], stdout, stderr, getenv)
	case "inject":
		return injectCmd(ctx, args[1:], stderr, getenv)
	case "config":
		return configCmd(args[1:], stdout, stderr, getenv)
	case "task":
		return taskCmd(args[1:], os.Stdin, stdout, stderr, getenv)
	case "dev":
		return devCmd(ctx, args[1:], stdout, stderr)
	case "completion":
		return completionCmd(args[1:], stdout, stderr)
	case "__complete": // for the completion scripts
		return completeCmd(ctx, args[1:], stdout)
	case "version":
		return versionCmd(args[1:], stdout, stderr)
	case "--version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		fmt.Fprintln(stderr, usage)
		return usagef("unknown command %q", args[0])
	}
}
