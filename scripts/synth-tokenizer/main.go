// Command synth-tokenizer builds the small tokenizer of the synthetic
// benchmark, assets/synth-tokenizer: a byte-level BPE tokenizer in Hugging
// Face's tokenizer.json format (Qwen's pre-tokenizer, NFC, byte-level
// decoder, Qwen3's 26 added tokens after the BPE vocabulary) trained on
// what a guard reads and writes on synthetic trajectories, and a
// tokenizer_config.json that is Qwen3's (its chat template included) with
// the added tokens' new ids.
//
//	go run ./scripts/synth-tokenizer [--out assets/synth-tokenizer] [--qwen assets/qwen3]
//
// The corpus: the trajectories of `mageguard data synth --n 400 --seed
// 1000`, and for every turn of each, under prompt versions synth (its
// tools not declared, as configs/synth-tiny.yaml runs it) and v1 (its
// tools declared), the memory manager's call (its prompt in the chat template, with the
// perfect memory of the turn before, and the perfect memory as its
// update_memory completion), the judge's call (the memory, the pending
// action, the right assess_risk completion) and the judge-only call; and,
// so that every identifier name is one token however rarely that seed
// draws it, each of synth.IDNames' identifiers of every suite, twice. The
// output depends on nothing else: rebuilding gives byte-identical files
// (TestCommittedTokenizerIsRebuilt).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/train/teacher"
)

// The corpus and the vocabulary.
const (
	corpusSeed = 1000 // the synthetic trajectories' seed (the bundled data uses 1 and 2)
	corpusN    = 400  // their number
	vocabSize  = 4000 // the most token ids, added tokens included
)

// promptVersions are the prompt templates whose calls are in the corpus,
// and whether their system prompts declare the tools
// (rollout.declare_tools).
var promptVersions = []struct {
	name    string
	declare bool
}{{"synth", false}, {"v1", true}}

func main() {
	out := flag.String("out", "assets/synth-tokenizer", "output directory")
	qwen := flag.String("qwen", "assets/qwen3", "directory of Qwen3's tokenizer_config.json (the chat template)")
	flag.Parse()
	if err := run(*out, *qwen); err != nil {
		fmt.Fprintln(os.Stderr, "synth-tokenizer:", err)
		os.Exit(1)
	}
}

func run(out, qwen string) error {
	qcfg, err := os.ReadFile(filepath.Join(qwen, "tokenizer_config.json"))
	if err != nil {
		return err
	}
	files, err := build(qcfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.WriteFile(filepath.Join(out, name), files[name], 0o644); err != nil {
			return err
		}
	}
	tok, err := tokenizer.FromJSON(files["tokenizer.json"])
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "synth-tokenizer: wrote %s: %d token ids\n", out, tok.VocabSize())
	return nil
}

// build returns the two files, by name, from Qwen3's tokenizer_config.json.
func build(qwenConfig []byte) (map[string][]byte, error) {
	texts, err := corpus()
	if err != nil {
		return nil, err
	}
	added := tokenizer.QwenAddedTokens()
	tj, err := tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: vocabSize, AddedTokens: added})
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromJSON(tj)
	if err != nil {
		return nil, err
	}
	cfg, err := remapConfig(qwenConfig, tok)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cfg}, nil
}

// corpus returns the texts the tokenizer is trained on (see the command's
// documentation).
func corpus() ([]string, error) {
	o := synth.DefaultOptions()
	o.N, o.Seed = corpusN, corpusSeed
	trs, err := synth.Generate(o)
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, version := range promptVersions {
		cfg := rollout.DefaultConfig()
		cfg.PromptVersion = version.name
		p, err := prompt.NewPrompts(cfg.PromptOptions())
		if err != nil {
			return nil, err
		}
		for _, tr := range trs {
			ms, err := teacher.Synth{}.Memories(tr, 0, len(tr.Turns))
			if err != nil {
				return nil, err
			}
			var history []prompt.HistoryStep
			for t, tu := range tr.Turns {
				// The memory call of turn t sees the user's request at the
				// first turn, then the previous action and its observation.
				var ev prompt.Events
				prev := ""
				if t == 0 {
					ev = prompt.Events{{User: &tr.UserPrompt}}
				} else {
					prev = ms[t-1]
					ev = prompt.Events{{Action: &tr.Turns[t-1].Action, Observation: tr.Turns[t-1].Observation}}
				}
				mem := prompt.ToolCall{Name: prompt.MemoryToolName, Content: ms[t]}
				texts = append(texts, render(p, version.declare, p.Memory(prev, ev), p.MemoryTool, mem))
				d, r := teacher.Decision(tr, t)
				judge := prompt.ToolCall{Name: prompt.JudgeToolName, Decision: d, Rationale: r}
				texts = append(texts, render(p, version.declare, p.Judge(ms[t], tu.Action), p.JudgeTool, judge))
				texts = append(texts, render(p, version.declare, p.JudgeOnly(tr.UserPrompt, history, nil, tu.Action), p.JudgeTool, judge))
				history = append(history, prompt.HistoryStep{Action: tu.Action, Observation: tu.Observation})
			}
		}
	}
	for _, name := range synth.IDNames() {
		ids := "acct-" + name + " user-" + name + " site-" + name
		texts = append(texts, ids, ids)
	}
	return texts, nil
}

// render writes one guard call of version ps as the model sees it: the
// prompt in the chat template (tool declared or not) with the generation
// prompt, then the completion.
func render(ps *prompt.Prompts, declare bool, p prompt.Prompt, tool chat.Tool, completion prompt.ToolCall) string {
	msgs := []chat.Message{chat.NewMessage(chat.RoleSystem, p.System), {Role: chat.RoleUser, Content: p.User}}
	var tools []chat.Tool
	if declare {
		tools = []chat.Tool{tool}
	}
	return chat.Render(msgs, tools, chat.Options{AddGenerationPrompt: true}) + completion.TextIn(ps.JudgeArgs) + "<|im_end|>"
}

// remapConfig returns Qwen3's tokenizer_config.json with its
// added_tokens_decoder keyed by tok's ids of the same tokens; every other
// key (the chat template, eos_token, …) is kept as it is, in its order.
func remapConfig(qwenConfig []byte, tok *tokenizer.Tokenizer) ([]byte, error) {
	keys, values, err := objectInOrder(qwenConfig)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kq, _ := json.Marshal(k)
		b.Write(kq)
		b.WriteByte(':')
		if k != "added_tokens_decoder" {
			b.Write(values[i])
			continue
		}
		var dec map[string]struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(values[i], &dec); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder: %w", err)
		}
		raw := map[string]json.RawMessage{}
		_ = json.Unmarshal(values[i], &raw) // parsed above
		type entry struct {
			id  int
			raw json.RawMessage
		}
		var entries []entry
		for oldID, v := range dec {
			id, ok := tok.TokenID(v.Content)
			if !ok || !tok.IsAdded(id) {
				return nil, fmt.Errorf("tokenizer_config.json: added token %q is not an added token of the new tokenizer", v.Content)
			}
			entries = append(entries, entry{id, raw[oldID]})
		}
		sort.Slice(entries, func(a, c int) bool { return entries[a].id < entries[c].id })
		b.WriteByte('{')
		for j, e := range entries {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(strconv.Itoa(e.id)) + ":")
			b.Write(e.raw)
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// objectInOrder returns the keys of a JSON object in the order written, and
// their raw values.
func objectInOrder(data []byte) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("want a JSON object")
	}
	var keys []string
	var values []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, t.(string))
		values = append(values, v)
	}
	return keys, values, nil
}
