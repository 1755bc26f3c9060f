package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/judgelabel"
	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/openai"
)

// newDataLabelCmd wires `data label` to dataset/judgelabel, its judge on
// the rollout section's OpenAI-compatible server.
func newDataLabelCmd() *cobra.Command {
	var in, out, cachePath, verify string
	o := judgelabel.Options{Retries: 3, Backoff: time.Second, MaxTokens: 512, MaxTextChars: 4000, MaxHistoryChars: 48000}
	cmd := &cobra.Command{
		Use:   "label --in FILE --out FILE [--only-unlabeled] [--verify FILE] [--cache FILE]",
		Short: "Label actions with an LLM judge on an OpenAI-compatible server",
		Long: `Label the actions of a trajectory file with an LLM judge (docs/data.md,
"LLM-as-judge labels"). The judge runs on the server of the rollout
section: rollout.generator openai, rollout.remote_api chat,
rollout.endpoint, rollout.remote_model (the judge model), rollout.api_key_env,
remote_timeout_s, remote_retries (429, 5xx and transport errors) and
remote_concurrency (the default of --concurrency); it is always asked on
/chat/completions, with the verdict function forced.

For each action (or, with --only-unlabeled, each one whose label_source
is assumed or guard) the judge sees the user's task, the earlier actions
with their outputs (the most recent that fit --max-history-chars), the
action, and the attack's injection task when the file names one, and
answers malicious or not, and why. The verdict is
written as the label with label_source judge and the reason as label_note;
a label given by a person (label_source human) stands. A benign trajectory
given a label 1 gets injection_task_id and attack_type "unknown".

Verdicts are cached by the question's content (--cache, default
judge-cache.jsonl beside --out) as they arrive: a rerun, or a run resumed
after an error, asks nothing twice. A failed question (a request error or
an answer that is not a verdict) is retried --retries times, waiting 1 s,
then 2 s, 4 s, ... --verify FILE writes every action whose verdict differs
from the label the file had, one JSON object a line, for a person to review.`,
		Example: `  mageguard data label --config judge.yaml --in chat.jsonl --out labeled.jsonl --verify review.jsonl
  mageguard data label --set rollout.generator=openai --set rollout.remote_api=chat \
    --set rollout.endpoint=https://api.openai.com/v1 --set rollout.remote_model=gpt-4o \
    --in sessions.jsonl --out labeled.jsonl --only-unlabeled`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if in == "" || out == "" {
				return fmt.Errorf("data label: --in and --out are required")
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			r := cfg.Rollout.RemoteConfig
			if r.Generator != rollout.GeneratorOpenAI || r.RemoteAPI != rollout.RemoteChat {
				return fmt.Errorf("data label: the judge runs on a chat server: set rollout.generator: openai and rollout.remote_api: chat (with rollout.endpoint and rollout.remote_model), got generator %q, remote_api %q", r.Generator, r.RemoteAPI)
			}
			if !cmd.Flags().Changed("concurrency") {
				o.Concurrency = r.RemoteConcurrency
			}
			if err := o.Validate(); err != nil {
				return fmt.Errorf("data label: %w", err)
			}
			key := ""
			if r.APIKeyEnv != "" {
				key = os.Getenv(r.APIKeyEnv)
			}
			gen, err := openai.New(r, nil, nil, key)
			if err != nil {
				return fmt.Errorf("data label: %w", err)
			}
			o.Client, o.Model = gen, r.RemoteModel
			if cachePath == "" {
				cachePath = filepath.Join(filepath.Dir(out), "judge-cache.jsonl")
			}
			trs, err := dataset.ReadAll(in)
			if err != nil {
				return err
			}
			if o.Cache, err = judgelabel.OpenCache(cachePath); err != nil {
				return fmt.Errorf("data label: --cache: %w", err)
			}
			defer o.Cache.Close()
			stderr := cmd.ErrOrStderr()
			start, last := time.Now(), time.Time{}
			o.Progress = func(done, total int) {
				if time.Since(last) >= time.Second || done == total {
					last = time.Now()
					fmt.Fprintf(stderr, "label: %d/%d questions answered (%.1fs)\n", done, total, time.Since(start).Seconds())
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sum, err := judgelabel.Label(ctx, trs, o)
			if err != nil {
				return fmt.Errorf("data label: %w (the %d verdicts received are in %s: rerun to resume)", err, o.Cache.Len(), cachePath)
			}
			if err := dataset.WriteAll(out, trs); err != nil {
				return err
			}
			if verify != "" {
				if err := writeDisagreements(verify, sum.Disagreements); err != nil {
					return err
				}
			}
			fmt.Fprintf(stderr, "label: wrote %s: %d actions judged (%d distinct questions: %d from the cache %s, %d requests), %d labels changed, %d disagreements with the file's labels, %d benign runs marked attacks of unknown task\n",
				out, sum.Judged, sum.Questions, sum.Cached, cachePath, sum.Asked, sum.Changed, len(sum.Disagreements), sum.MarkedAttack)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&in, "in", "", "trajectories to label, .jsonl or .parquet (required)")
	fl.StringVar(&out, "out", "", "labeled output, .jsonl or .parquet (required)")
	fl.StringVar(&cachePath, "cache", "", "verdict cache, JSONL (default: judge-cache.jsonl in the directory of --out)")
	fl.StringVar(&verify, "verify", "", "write every disagreement with the file's labels here, one JSON object a line")
	fl.BoolVar(&o.OnlyUnlabeled, "only-unlabeled", false, "judge only actions whose label_source is assumed or guard")
	fl.IntVar(&o.Concurrency, "concurrency", 0, "questions in flight at once, 1-1024 (default: rollout.remote_concurrency)")
	fl.IntVar(&o.Retries, "retries", o.Retries, "retries of a failed question, 0-20 (backoff 1 s, doubled each time)")
	fl.IntVar(&o.MaxTokens, "max-tokens", o.MaxTokens, "the judge's answer budget in tokens, 16-65536")
	fl.IntVar(&o.MaxTextChars, "max-text-chars", o.MaxTextChars, "each text of a question (task, arguments, output) is cut to this many characters, marked as cut; 100-1048576")
	fl.IntVar(&o.MaxHistoryChars, "max-history-chars", o.MaxHistoryChars, "a question shows the most recent earlier actions that fit this many characters, the elided ones counted; 0-16777216")
	return cmd
}

// writeDisagreements writes ds to path, one JSON object a line, atomically.
func writeDisagreements(path string, ds []judgelabel.Disagreement) error {
	af, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer af.Abort()
	bw := bufio.NewWriter(af)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, d := range ds {
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return af.Commit()
}
