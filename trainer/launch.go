package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ToolMissingError says that a training tool is not installed here, and how to
// get it: `--launch local` checks before it starts anything.
type ToolMissingError struct {
	Tool string // what is missing, as a user would type it
	Hint string // how to install it
}

func (e *ToolMissingError) Error() string {
	return fmt.Sprintf("%s is not installed here: %s", e.Tool, e.Hint)
}

// CheckTool verifies that what the generated script runs is installed: stage is
// sft, dpo (llamafactory-cli), grpo (python3 importing verl) or grpo-ray (ray).
func CheckTool(ctx context.Context, stage string) error {
	switch stage {
	case "sft", "dpo":
		if _, err := exec.LookPath("llamafactory-cli"); err != nil {
			return &ToolMissingError{"llamafactory-cli", "pip install 'llamafactory[torch,metrics,deepspeed]' (https://github.com/hiyouga/LLaMA-Factory)"}
		}
	case "grpo":
		if _, err := exec.LookPath("python3"); err != nil {
			return &ToolMissingError{"python3", "veRL runs on Python 3.10 or newer"}
		}
		if _, err := VerlVersion(ctx); err != nil {
			return err
		}
	case "grpo-ray":
		if _, err := exec.LookPath("ray"); err != nil {
			return &ToolMissingError{"ray", "pip install 'ray[default]'"}
		}
	default:
		return fmt.Errorf("launch: unknown stage %q", stage)
	}
	return nil
}

// VerlVersion is the version of the veRL python3 imports (verl.__version__), the
// way grpo.sh reads it to choose the reward wiring (VerlRewardMode).
func VerlVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // importing verl pulls in torch: slow, not endless
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-c", "import verl; print(verl.__version__)")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		last := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		if last == "" {
			last = err.Error()
		}
		return "", &ToolMissingError{"python3 -m verl", fmt.Sprintf("python3 cannot import verl (%s): pip install 'verl[vllm]' (https://verl.readthedocs.io)", last)}
	}
	return strings.TrimSpace(string(out)), nil
}

// Launch runs argv in dir, streaming its output, until it ends or ctx is done (an
// interrupt is passed on, then a kill after a grace). A non-zero exit comes back
// as an *exec.ExitError.
func Launch(ctx context.Context, dir string, argv []string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = os.Environ()
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // let trainers save and stop
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fmt.Errorf("launch %s: %w", strings.Join(argv, " "), err)
	}
	return err
}
