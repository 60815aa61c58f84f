package trainer

import (
	"errors"
	"path/filepath"
)

// Dataset names in dataset_info.json.
const (
	SFTTrainDataset = "camproxy_sft_train"
	SFTValDataset   = "camproxy_sft_val"
	DPOTrainDataset = "camproxy_dpo_train"
	DPOValDataset   = "camproxy_dpo_val"
)

// LFOptions configures the LLaMA-Factory writers (WriteSFT, WriteDPO).
type LFOptions struct {
	Out      string   // the directory written
	Prompter Prompter // the serving CAM's prompt
	Val      float64  // share of tasks held out for validation
	Seed     int64    // seed of the split
	Recipe   Recipe
	JobPath  string      // --out's path inside the Job's claim; "" = the claim's root
	Kube     KubeOptions // the Job's model claim and retries; its image, GPUs and claim come from Recipe
}

// Written says what a Write* call produced.
type Written struct {
	Dir                  string
	Train, Val           int // records
	TrainTasks, ValTasks int
	Files                []string // relative to Dir
	Command              []string // what runs the training, from Dir
	RayCommand           []string // GRPO: the cluster variant
	BatchSize            int      // GRPO: tasks per step
	Warnings             []string // what will not go as the user may expect, e.g. tasks veRL drops
}

// ErrNoData is returned when there is nothing to train on.
var ErrNoData = errors.New("no training example")

// WriteSFT writes LLaMA-Factory's SFT inputs for exs into o.Out:
//
//	data/camproxy_sft_train.json, data/camproxy_sft_val.json  alpaca records
//	data/dataset_info.json                                     the column mapping
//	sft.yaml, ds_z3_config.json                                the recipe
//	run.sh, job.yaml                                           how to run it
func WriteSFT(exs []Example, o LFOptions) (*Written, error) {
	if len(exs) == 0 {
		return nil, ErrNoData
	}
	s := SplitExamples(exs, o.Val, o.Seed)
	system := false
	records := func(exs []Example) []alpacaSFT {
		out := make([]alpacaSFT, 0, len(exs))
		for _, e := range exs {
			sys, user := o.Prompter.Prompt(e.Task)
			system = system || sys != ""
			out = append(out, alpacaSFT{Instruction: user, Output: e.Guidance, System: sys})
		}
		return out
	}
	train, val := records(s.Train), records(s.Val)
	w := &Written{Train: len(train), Val: len(val), TrainTasks: TaskCount(s.Train), ValTasks: TaskCount(s.Val)}
	return writeLlamaFactory("sft", o, w, lfData{train: train, val: val, info: sftDatasetInfo, system: system,
		trainName: SFTTrainDataset, valName: SFTValDataset})
}

// resolve makes --out, the model and the checkpoint directory absolute, and checks
// the model (ResolveModel): run.sh runs in --out, where a relative path means
// something else than on the command line.
func (o *LFOptions) resolve() error {
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return err
	}
	o.Out = out
	if o.Recipe.Model, err = ResolveModel(o.Recipe.Model); err != nil {
		return err
	}
	o.Recipe.OutputDir, err = absUnder(out, o.Recipe.OutputDir)
	return err
}

// lfData is one stage's records and how dataset_info.json describes them.
type lfData struct {
	train, val         any // slices of records
	info               func(file string, system bool) DatasetInfo
	system             bool // the records carry a system prompt
	trainName, valName string
}

// writeLlamaFactory writes the files every LLaMA-Factory stage needs.
func writeLlamaFactory(stage string, o LFOptions, w *Written, d lfData) (*Written, error) {
	if err := o.Recipe.Validate(stage); err != nil {
		return nil, err
	}
	if err := o.resolve(); err != nil {
		return nil, err
	}
	if err := prepareOut(o.Out); err != nil {
		return nil, err
	}
	w.Dir, w.Command = o.Out, []string{"bash", "run.sh"}
	info := map[string]DatasetInfo{d.trainName: d.info(d.trainName+".json", d.system)}
	out := &fileSet{dir: o.Out}
	out.json(datasetDir+"/"+d.trainName+".json", d.train)
	valName := ""
	if w.Val > 0 {
		valName = d.valName
		info[valName] = d.info(valName+".json", d.system)
		out.json(datasetDir+"/"+valName+".json", d.val)
	}
	out.json(datasetDir+"/dataset_info.json", info)
	out.write(stage+".yaml", []byte(llamaFactoryYAML(stage, o.Recipe, d.trainName, valName, d.system)), 0o644)
	out.write("run.sh", []byte(runScript(stage)), 0o755)
	if ds := o.Recipe.DeepSpeed; ds != "" && ds != "none" {
		out.write(deepSpeedFile(ds), deepSpeedConfig(ds), 0o644)
	}
	w.Warnings = append(w.Warnings, writeJob(out, o.stageJob(stage))...)
	w.Files = out.files
	return w, out.err
}
