package train

// The run's checkpoints: the output folder's preparation and clean-up,
// saving, pruning, and resuming from the newest one
// (docs/design.md#checkpoints).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
)

var checkpointRe = regexp.MustCompile(`^checkpoint-(\d+)$`)

func checkpointDir(out string, step int) string {
	return filepath.Join(out, fmt.Sprintf("checkpoint-%d", step))
}

// prepareOut creates the output directory. Without resume, it refuses a
// directory that already holds checkpoints, so nothing is overwritten. It
// then cleans up after a run that was killed mid-write (the caller holds
// the folder's lock, so no one else is writing there): temporary files and
// folders are removed, and a checkpoint moved aside by
// atomicfile.ReplaceDir whose replacement never arrived is put back.
func prepareOut(out string, resume bool, log io.Writer) error {
	if out == "" {
		return fmt.Errorf("train: no output directory (--out)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := removeStale(out, log); err != nil {
		return err
	}
	if !resume {
		if dir, _, err := latestCheckpoint(out); err != nil {
			return err
		} else if dir != "" {
			return fmt.Errorf("train: %s already holds %s: use --resume to continue it, or another --out", out, filepath.Base(dir))
		}
	}
	return nil
}

// asideRe matches a checkpoint atomicfile.ReplaceDir moved aside.
var asideRe = regexp.MustCompile(`^checkpoint-(\d+|best)` + regexp.QuoteMeta(atomicfile.AsideSuffix) + `$`)

// removeStale removes what a killed run left in out: atomicfile's
// temporary files and model.Save's temporary folders (".NAME.tmp-DIGITS"),
// the checkpoint folders built under ".checkpoint-STEP.tmp" and
// ".checkpoint-best.tmp", and older checkpoints moved aside
// ("checkpoint-STEP.old"), which go back to their name when the new one
// never replaced them.
func removeStale(out string, log io.Writer) error {
	removed, err := atomicfile.RemoveStale(out)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(out, name)
		if matched, _ := filepath.Match(".checkpoint-*.tmp", name); matched {
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			removed = append(removed, name)
			continue
		}
		if asideRe.MatchString(name) {
			final := strings.TrimSuffix(path, atomicfile.AsideSuffix)
			if _, err := os.Stat(final); os.IsNotExist(err) {
				if err := os.Rename(path, final); err != nil {
					return err
				}
				fmt.Fprintf(log, "train: %s: put back %s, moved aside by a run killed while replacing it\n", out, filepath.Base(final))
				continue
			}
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			removed = append(removed, name)
		}
	}
	if len(removed) > 0 {
		fmt.Fprintf(log, "train: %s: removed %d leftovers of a killed run: %s\n", out, len(removed), strings.Join(removed, ", "))
	}
	return nil
}

// latestCheckpoint returns the newest complete checkpoint in out (one with
// its trainer_state.json, which is written last) and its step.
func latestCheckpoint(out string) (string, int, error) {
	entries, err := os.ReadDir(out)
	if os.IsNotExist(err) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	best, bestStep := "", 0
	for _, e := range entries {
		m := checkpointRe.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		step, _ := strconv.Atoi(m[1])
		dir := filepath.Join(out, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "trainer_state.json")); os.IsNotExist(err) {
			continue // incomplete: trainer_state.json is written last
		}
		if _, err := readTrainerState(dir); err != nil {
			return "", 0, fmt.Errorf("train: %s is damaged: %w", dir, err) // never resume silently from an older one
		}
		if step > bestStep {
			best, bestStep = dir, step
		}
	}
	return best, bestStep, nil
}

// trainerState is trainer_state.json: where a checkpoint stands.
type trainerState struct {
	Step           int    `json:"step"`            // training steps done
	OptimizerSteps int    `json:"optimizer_steps"` // AdamW steps done (step × num_iterations)
	Seed           uint64 `json:"seed"`
	Time           string `json:"time"`
}

// saveModel writes the model into dir in train.checkpoint_dtype, its weights from the
// trainer's float32 masters when it keeps them (bfloat16 training): a Hugging Face checkpoint,
// or with a LoRA adapter a PEFT adapter directory on the frozen base; with the run's resolved
// configuration as checkpoint.SettingsFile.
func (r *run) saveModel(dir string) error {
	masters, err := r.trainer.MasterWeights()
	if err != nil {
		return err
	}
	opts := model.SaveOptions{DType: r.opts.Train.CheckpointDType, Tokenizer: r.tokFiles, Values: masters}
	if r.model.Adapter() != nil {
		err = r.model.SaveAdapter(dir, opts)
	} else {
		err = r.model.Save(dir, opts)
	}
	if err != nil || r.opts.ResolvedConfig == nil {
		return err
	}
	// The settings it was trained with, which eval, serve and mcp start from.
	return atomicfile.WriteFile(filepath.Join(dir, checkpoint.SettingsFile), r.opts.ResolvedConfig)
}

// saveCheckpoint writes checkpoint-STEP: the Hugging Face model directory,
// optimizer.safetensors and trainer_state.json, built under a temporary
// name and renamed (docs/design.md#checkpoints), then prunes old
// checkpoints beyond keep_last.
func (r *run) saveCheckpoint(step int) (string, error) {
	o := r.opts
	final := checkpointDir(o.Out, step)
	tmp := filepath.Join(o.Out, fmt.Sprintf(".checkpoint-%d.tmp", step))
	os.RemoveAll(tmp)
	if err := r.saveModel(tmp); err != nil {
		return "", fmt.Errorf("checkpoint %d: %w", step, err)
	}
	state, err := r.trainer.OptimizerState()
	if err != nil {
		return "", fmt.Errorf("checkpoint %d: %w", step, err)
	}
	moments := map[string]*tensors.Tensor{}
	for k, v := range state {
		if k != "step" {
			moments[k] = v
		}
	}
	if err := safetensors.WriteFloat32(filepath.Join(tmp, "optimizer.safetensors"), moments); err != nil {
		return "", fmt.Errorf("checkpoint %d: %w", step, err)
	}
	ts, _ := json.MarshalIndent(trainerState{Step: step, OptimizerSteps: r.trainer.Steps(), Seed: o.Train.Seed,
		Time: time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(tmp, "trainer_state.json"), ts); err != nil {
		return "", fmt.Errorf("checkpoint %d: %w", step, err)
	}
	if err := atomicfile.ReplaceDir(tmp, final); err != nil { // final may be a stale copy without trainer_state.json
		return "", fmt.Errorf("checkpoint %d: %w", step, err)
	}
	fmt.Fprintf(r.log, "saved %s\n", final)
	r.prune()
	return final, nil
}

// prune removes step checkpoints beyond the newest keep_last.
func (r *run) prune() {
	keep := r.opts.Train.KeepLast
	if keep <= 0 {
		return
	}
	entries, _ := os.ReadDir(r.opts.Out)
	var steps []int
	for _, e := range entries {
		if m := checkpointRe.FindStringSubmatch(e.Name()); m != nil {
			s, _ := strconv.Atoi(m[1])
			steps = append(steps, s)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(steps)))
	for i, s := range steps {
		if i >= keep {
			os.RemoveAll(checkpointDir(r.opts.Out, s))
		}
	}
}

// maxTrainerStateBytes bounds trainer_state.json (it is ~100 bytes).
const maxTrainerStateBytes = 1 << 16

// readTrainerState reads a checkpoint's trainer_state.json strictly: a
// small file, no unknown or repeated key, counts that are not negative.
func readTrainerState(dir string) (*trainerState, error) {
	path := filepath.Join(dir, "trainer_state.json")
	data, err := strictjson.ReadFile(path, maxTrainerStateBytes)
	if err != nil {
		return nil, err
	}
	var ts trainerState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ts); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if ts.Step < 0 || ts.OptimizerSteps < 0 {
		return nil, fmt.Errorf("%s: step %d and optimizer_steps %d must not be negative", path, ts.Step, ts.OptimizerSteps)
	}
	return &ts, nil
}

// restoreTrainer loads the optimizer state of a checkpoint. The moments'
// shapes are checked against the model's weights before any is read.
func (r *run) restoreTrainer(dir string, step int) error {
	ts, err := readTrainerState(dir)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if ts.Step != step {
		return fmt.Errorf("resume: %s says step %d", dir, ts.Step)
	}
	if ts.Seed != r.opts.Train.Seed {
		fmt.Fprintf(r.log, "resume: warning: train.seed %d differs from the checkpoint's %d: the next steps will not match an uninterrupted run\n", r.opts.Train.Seed, ts.Seed)
	}
	state := map[string]*tensors.Tensor{}
	if ts.OptimizerSteps > 0 {
		path := filepath.Join(dir, "optimizer.safetensors")
		shapes, err := safetensors.ReadShapes(path)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if err := checkMoments(path, shapes, r.model); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if state, err = safetensors.ReadFloat32(path); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	state["step"] = tensors.FromScalar(int64(ts.OptimizerSteps))
	if err := r.trainer.SetOptimizerState(state); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// checkMoments requires every tensor of an optimizer state file to be an
// AdamW moment ("exp_avg/…" or "exp_avg_sq/…") or a float32 master weight
// ("master/…") of one of m's weights, with that weight's shape.
func checkMoments(path string, shapes map[string][]int, m *model.Model) error {
	weights := map[string][]int{}
	for v := range m.Context().IterVariables() {
		weights[strings.TrimSuffix(v.Scope(), mlctx.ScopeSeparator)+mlctx.ScopeSeparator+v.Name()] = v.Shape().Dimensions
	}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		kind, rest, _ := strings.Cut(name, "/")
		want, ok := weights["/"+rest]
		if (kind != "exp_avg" && kind != "exp_avg_sq" && kind != "master") || !ok {
			return fmt.Errorf("%s: tensor %s is not an AdamW moment or master weight of this model's weights", path, name)
		}
		if fmt.Sprint(shapes[name]) != fmt.Sprint(want) {
			return fmt.Errorf("%s: tensor %s has shape %v, the model's weight has %v", path, name, shapes[name], want)
		}
	}
	return nil
}
