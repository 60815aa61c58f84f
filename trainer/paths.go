package trainer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The generated scripts change into their own directory before they start a tool,
// and the tools try a model path that does not exist as a Hugging Face hub id: a
// relative path written as given points nowhere, and fails only on the GPU box. So
// every path the training files name is made absolute when they are written, and a
// model must be a checkpoint that is there, or be marked as a hub id.

// HubPrefix marks a model given as a Hugging Face hub id ("hub:Qwen/Qwen3-32B"):
// it is written without the prefix and not looked for on disk.
const HubPrefix = "hub:"

// SFTCheckpoint is where train sft's checkpoint goes, under its --out.
const SFTCheckpoint = "saves/cam-sft"

// DefaultSFTModel is the model DPO and GRPO start from unless told otherwise: the
// checkpoint of `camproxy train sft --out sft`, run from the same directory.
var DefaultSFTModel = filepath.Join("sft", filepath.FromSlash(SFTCheckpoint))

// ErrModel is wrapped by the errors of ResolveModel.
var ErrModel = errors.New("model")

// ResolveModel turns a --model value into what a tool is given: a hub id without
// its "hub:" prefix, or the absolute path of a directory holding a Hugging Face
// checkpoint (its config.json).
func ResolveModel(spec string) (string, error) {
	if id, ok := strings.CutPrefix(spec, HubPrefix); ok {
		if org, name, ok := strings.Cut(id, "/"); !ok || org == "" || name == "" || strings.ContainsAny(id, " \t\n") || strings.Contains(name, "/") {
			return "", fmt.Errorf("%w %q: a hub id is ORG/NAME, e.g. hub:Qwen/Qwen3-32B", ErrModel, spec)
		}
		return id, nil
	}
	if spec == "" {
		return "", fmt.Errorf("%w: empty", ErrModel)
	}
	abs, err := filepath.Abs(spec)
	if err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrModel, spec, err)
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		hint := ""
		if strings.Count(spec, "/") == 1 && !strings.HasPrefix(spec, ".") {
			hint = fmt.Sprintf(" (a Hugging Face id is written %s%s)", HubPrefix, spec)
		}
		return "", fmt.Errorf("%w %s: no such directory%s", ErrModel, abs, hint)
	case err != nil:
		return "", fmt.Errorf("%w %s: %v", ErrModel, abs, err)
	case !st.IsDir():
		return "", fmt.Errorf("%w %s: not a directory (want a checkpoint directory with a config.json)", ErrModel, abs)
	}
	if _, err := os.Stat(filepath.Join(abs, "config.json")); err != nil {
		if _, aerr := os.Stat(filepath.Join(abs, "adapter_config.json")); aerr == nil {
			return "", fmt.Errorf("%w %s holds a LoRA adapter, not a model: merge it into its base first (llamafactory-cli export)", ErrModel, abs)
		}
		return "", fmt.Errorf("%w %s has no config.json: not a Hugging Face checkpoint (has training finished?)", ErrModel, abs)
	}
	return abs, nil
}

// absUnder makes p absolute, relative to dir when it is not already.
func absUnder(dir, p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Abs(p)
}
