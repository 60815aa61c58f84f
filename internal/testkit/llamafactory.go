package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LFRecord is one alpaca record as LLaMA-Factory's converter reads it: the record's
// keys looked up through the dataset's column mapping.
type LFRecord struct {
	Prompt, Query, Response, System string
	Chosen, Rejected                string
}

// LFDataset is a dataset_info.json entry and its records.
type LFDataset struct {
	Name    string
	Ranking bool
	Records []LFRecord
}

// LFConfig is a LLaMA-Factory training config that passed CheckLlamaFactory.
type LFConfig struct {
	Raw            map[string]any
	Train, Eval    []LFDataset
	DeepSpeedStage int
}

// alpacaColumns are the column keys LLaMA-Factory's alpaca formatting knows
// (data/README.md of hiyouga/LLaMA-Factory).
var alpacaColumns = []string{"prompt", "query", "response", "history", "system", "tools", "images", "videos", "audios", "chosen", "rejected", "kto_tag"}

// yaml11NoDotExp matches a scientific-notation number without a dot, which YAML 1.1
// readers (PyYAML, used by LLaMA-Factory) load as a string.
var yaml11NoDotExp = regexp.MustCompile(`(?m):\s+[-+]?[0-9]+[eE][-+]?[0-9]+\s*$`)

// CheckLlamaFactory validates the training config dir/yamlName the way
// LLaMA-Factory would load it: the YAML's keys, its datasets resolved through
// dataset_dir/dataset_info.json, every record's mapped columns, and the DeepSpeed
// file. It follows LLaMA-Factory's documented format, not its code.
func CheckLlamaFactory(dir, yamlName string) (*LFConfig, error) {
	raw, err := os.ReadFile(filepath.Join(dir, yamlName))
	if err != nil {
		return nil, err
	}
	if m := yaml11NoDotExp.Find(raw); m != nil {
		return nil, fmt.Errorf("%s: %q is a string to a YAML 1.1 reader: write 1.0e-5, not 1e-5", yamlName, bytes.TrimSpace(m))
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", yamlName, err)
	}
	str := func(k string) string { s, _ := cfg[k].(string); return s }
	var problems []string
	for _, k := range []string{"model_name_or_path", "stage", "finetuning_type", "dataset", "template", "output_dir", "dataset_dir"} {
		if str(k) == "" {
			problems = append(problems, k+" must be a non-empty string")
		}
	}
	if cfg["do_train"] != true {
		problems = append(problems, "do_train must be true")
	}
	if !slices.Contains([]string{"pt", "sft", "rm", "ppo", "dpo", "kto"}, str("stage")) {
		problems = append(problems, fmt.Sprintf("stage %q unknown", str("stage")))
	}
	for _, k := range []string{"learning_rate", "num_train_epochs", "warmup_ratio"} {
		if _, ok := cfg[k].(float64); !ok {
			problems = append(problems, fmt.Sprintf("%s must be a float, is %T", k, cfg[k]))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", yamlName, strings.Join(problems, "; "))
	}
	out := &LFConfig{Raw: cfg}
	if ds := str("deepspeed"); ds != "" {
		b, err := os.ReadFile(filepath.Join(dir, ds))
		if err != nil {
			return nil, fmt.Errorf("deepspeed: %w", err)
		}
		var dsc struct {
			Zero struct {
				Stage int `json:"stage"`
			} `json:"zero_optimization"`
		}
		if err := json.Unmarshal(b, &dsc); err != nil || dsc.Zero.Stage == 0 {
			return nil, fmt.Errorf("deepspeed %s: no zero_optimization.stage (%v)", ds, err)
		}
		out.DeepSpeedStage = dsc.Zero.Stage
	}
	dataDir := filepath.Join(dir, str("dataset_dir"))
	infoRaw, err := os.ReadFile(filepath.Join(dataDir, "dataset_info.json"))
	if err != nil {
		return nil, err
	}
	var info map[string]struct {
		FileName   string            `json:"file_name"`
		Formatting string            `json:"formatting"`
		Ranking    bool              `json:"ranking"`
		Columns    map[string]string `json:"columns"`
	}
	if err := json.Unmarshal(infoRaw, &info); err != nil {
		return nil, fmt.Errorf("dataset_info.json: %w", err)
	}
	load := func(names string) ([]LFDataset, error) {
		var sets []LFDataset
		for _, name := range strings.Split(names, ",") {
			name = strings.TrimSpace(name)
			e, ok := info[name]
			if !ok {
				return nil, fmt.Errorf("dataset %q is not in dataset_info.json", name)
			}
			if e.Formatting != "" && e.Formatting != "alpaca" {
				return nil, fmt.Errorf("dataset %q: formatting %q, the check knows alpaca", name, e.Formatting)
			}
			for k := range e.Columns {
				if !slices.Contains(alpacaColumns, k) {
					return nil, fmt.Errorf("dataset %q: column key %q is not one of alpaca's", name, k)
				}
			}
			if e.Ranking {
				if _, ok := e.Columns["response"]; ok {
					return nil, fmt.Errorf("dataset %q: ranking maps chosen/rejected, not response", name)
				}
			}
			col := func(k, def string) string {
				if c := e.Columns[k]; c != "" {
					return c
				}
				return def
			}
			data, err := os.ReadFile(filepath.Join(dataDir, e.FileName))
			if err != nil {
				return nil, fmt.Errorf("dataset %q: %w", name, err)
			}
			var recs []map[string]any
			if err := json.Unmarshal(data, &recs); err != nil {
				return nil, fmt.Errorf("dataset %q: %s is not a JSON array of objects: %w", name, e.FileName, err)
			}
			set := LFDataset{Name: name, Ranking: e.Ranking}
			for i, r := range recs {
				get := func(k, def string, required bool) (string, error) {
					c := col(k, def)
					if c == "" {
						return "", nil
					}
					v, ok := r[c]
					if !ok || v == nil {
						if required {
							return "", fmt.Errorf("dataset %q record %d: no %q (%s)", name, i, c, k)
						}
						return "", nil
					}
					s, ok := v.(string)
					if !ok {
						return "", fmt.Errorf("dataset %q record %d: %q is %T, want a string", name, i, c, v)
					}
					if required && strings.TrimSpace(s) == "" {
						return "", fmt.Errorf("dataset %q record %d: %q is empty", name, i, c)
					}
					return s, nil
				}
				var rec LFRecord
				var errs [6]error
				rec.Prompt, errs[0] = get("prompt", "instruction", true)
				rec.Query, errs[1] = get("query", "input", false)
				rec.System, errs[2] = get("system", "", false)
				if e.Ranking {
					rec.Chosen, errs[3] = get("chosen", "", true)
					rec.Rejected, errs[4] = get("rejected", "", true)
					if rec.Chosen == rec.Rejected {
						errs[5] = fmt.Errorf("dataset %q record %d: chosen equals rejected", name, i)
					}
				} else {
					rec.Response, errs[3] = get("response", "output", true)
				}
				for _, err := range errs {
					if err != nil {
						return nil, err
					}
				}
				set.Records = append(set.Records, rec)
			}
			if len(set.Records) == 0 {
				return nil, fmt.Errorf("dataset %q is empty", name)
			}
			sets = append(sets, set)
		}
		return sets, nil
	}
	if out.Train, err = load(str("dataset")); err != nil {
		return nil, err
	}
	if ev := str("eval_dataset"); ev != "" {
		if out.Eval, err = load(ev); err != nil {
			return nil, err
		}
	}
	if str("stage") == "dpo" || str("stage") == "rm" {
		for _, s := range append(slices.Clone(out.Train), out.Eval...) {
			if !s.Ranking {
				return nil, fmt.Errorf("stage %s needs ranking datasets; %q is not", str("stage"), s.Name)
			}
		}
	}
	return out, nil
}
