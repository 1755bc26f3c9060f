package main

// mageguard model score: the file-level parts (reading inputs.json, writing
// the scores in the reference cases' expected.json format) around
// model.(*Model).Score.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/model"
)

func newModelScoreCmd() *cobra.Command {
	var dir, input, out string
	cmd := &cobra.Command{
		Use:   "score --model DIR --input inputs.json --out out.json",
		Short: "Logits, log-probs and greedy tokens of token sequences, in the reference cases' expected.json format",
		Long: `score reads an inputs.json ({"sequences": [[ids...], ...], "max_new_tokens": 8,
"n_last_logits": 3, "pad_token_id": 0}), runs the sequences as one right-padded
batch and greedy-decodes max_new_tokens after each with the KV cache, and writes
{"sequences": [{input_ids, length, argmax, argmax_margin, logsumexp,
next_token_logprobs, last_logits_positions, last_logits, greedy_new_tokens,
greedy_margins, greedy_logprobs}, ...]} — the format of the reference cases'
expected.json (model/testdata) and of scripts/qwen3_ref.py score.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if input == "" || out == "" {
				return errors.New("model score: --input and --out are required")
			}
			in, err := readScoreInput(input)
			if err != nil {
				return err
			}
			s, err := checkpointSettings(cfg, dir)
			if err != nil {
				return err
			}
			m, err := loadModel(s)
			if err != nil {
				return err
			}
			seqs, err := m.Score(in.Sequences, in.ScoreOptions)
			if err != nil {
				return fmt.Errorf("%s: %w", input, err)
			}
			return writeScores(out, seqs)
		},
	}
	cmd.Flags().StringVar(&dir, "model", "", "checkpoint directory (default: model.path)")
	cmd.Flags().StringVar(&input, "input", "", "inputs.json to score")
	cmd.Flags().StringVar(&out, "out", "", "file to write the scores to")
	return cmd
}

// scoreInput is an inputs.json of the reference cases (model/testdata).
type scoreInput struct {
	Sequences          [][]int `json:"sequences"` // token ids, one list per sequence
	model.ScoreOptions         // max_new_tokens, n_last_logits, pad_token_id
}

// readScoreInput reads an inputs.json, with the reference's defaults for
// absent keys (model.DefaultScoreOptions).
func readScoreInput(path string) (*scoreInput, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("score input: %w", err)
	}
	in := &scoreInput{ScoreOptions: model.DefaultScoreOptions()}
	if err := json.Unmarshal(data, in); err != nil {
		return nil, fmt.Errorf("score input %s: %w", path, err)
	}
	if len(in.Sequences) == 0 {
		return nil, fmt.Errorf("score input %s: sequences: want at least one sequence", path)
	}
	return in, nil
}

// scoreOutput is the expected.json-shaped file `model score` writes.
type scoreOutput struct {
	Format    string                `json:"format"`
	Generator string                `json:"generator"`
	Sequences []model.ScoreSequence `json:"sequences"`
}

// writeScores writes the scores of seqs as JSON to path, through a
// temporary file and a rename.
func writeScores(path string, seqs []model.ScoreSequence) error {
	data, err := json.Marshal(scoreOutput{Format: "qwen3-ref-expected-v1", Generator: "mageguard model score (GoMLX)", Sequences: seqs})
	if err != nil {
		return fmt.Errorf("score output: %w", err)
	}
	return atomicfile.WriteFile(path, append(data, '\n'))
}
