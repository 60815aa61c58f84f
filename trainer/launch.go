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
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // importing verl pulls in torch: slow, not endless
		defer cancel()
		out, err := exec.CommandContext(ctx, "python3", "-c", "import verl").CombinedOutput()
		if err != nil {
			last := strings.TrimSpace(string(out))
			if i := strings.LastIndexByte(last, '\n'); i >= 0 {
				last = last[i+1:]
			}
			return &ToolMissingError{"python3 -m verl", fmt.Sprintf("python3 cannot import verl (%s): pip install 'verl[vllm]' (https://verl.readthedocs.io)", last)}
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
