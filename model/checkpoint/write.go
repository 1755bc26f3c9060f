package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/model/safetensors"
)

// Contents are what Write puts in a checkpoint directory.
type Contents struct {
	Weights []safetensors.Tensor // in the order they are written
	// MaxShardBytes splits the weights into model-0000k-of-0000n.safetensors
	// files of at most this size, listed in model.safetensors.index.json (a
	// tensor larger than that gets a shard of its own); <= 0 = one
	// model.safetensors.
	MaxShardBytes int64
	Files         map[string][]byte // every other file, by name (config.json, generation_config.json)
	Tokenizer     TokenizerFiles    // the tokenizer's files; only the names of TokenizerFileNames are written
}

// Write writes c into dir as a Hugging Face checkpoint. Every file is
// written to a temporary name and renamed; when dir does not exist yet the
// whole directory is built under a temporary name and renamed at the end,
// so a crash never leaves a half-written checkpoint. Weight files of an
// earlier save into dir that this one did not write are removed.
func Write(dir string, c Contents) error {
	return writeDir(dir, func(tmp string) error { return c.writeInto(tmp, dir) })
}

// writeDir runs fill on dir when it exists; otherwise on a new temporary
// directory beside it, renamed to dir once fill succeeded.
func writeDir(dir string, fill func(dir string) error) error {
	_, statErr := os.Stat(dir)
	if statErr != nil && !os.IsNotExist(statErr) {
		return fmt.Errorf("save %s: %w", dir, statErr)
	}
	if statErr == nil {
		return fill(dir)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // a no-op after the final rename
	if err := fill(tmp); err != nil {
		return err
	}
	if err := atomicfile.ReplaceDir(tmp, dir); err != nil { // mode 0755, the rename synced
		return fmt.Errorf("save %s: %w", dir, err)
	}
	return nil
}

// writeInto writes c's files into dir; errors name final, the checkpoint
// being written.
func (c *Contents) writeInto(dir, final string) error {
	written, err := writeWeights(dir, final, c.Weights, c.MaxShardBytes)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Files)) {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), c.Files[name]); err != nil {
			return err
		}
	}
	for _, name := range TokenizerFileNames {
		if data, ok := c.Tokenizer[name]; ok {
			if err := atomicfile.WriteFile(filepath.Join(dir, name), data); err != nil {
				return fmt.Errorf("save %s: %w", final, err)
			}
		}
	}
	return removeStaleWeights(dir, final, written)
}

// writeWeights writes ts as model.safetensors, or as shards of at most
// maxBytes and their index, and returns the names of the files written.
func writeWeights(dir, final string, ts []safetensors.Tensor, maxBytes int64) (map[string]bool, error) {
	meta := map[string]string{"format": "pt"}
	shards := planShards(ts, maxBytes)
	if len(shards) == 1 {
		if err := safetensors.Write(filepath.Join(dir, WeightsFile), shards[0], meta); err != nil {
			return nil, err
		}
		return map[string]bool{WeightsFile: true}, nil
	}
	written := map[string]bool{}
	idx := index{Metadata: map[string]any{}, WeightMap: map[string]string{}}
	var total int64
	for i, shard := range shards {
		name := shardFileName(i, len(shards))
		if err := safetensors.Write(filepath.Join(dir, name), shard, meta); err != nil {
			return nil, err
		}
		written[name] = true
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
			total += t.Bytes()
		}
	}
	idx.Metadata["total_size"] = total
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("save %s: index: %w", final, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, IndexFile), data); err != nil {
		return nil, err
	}
	written[IndexFile] = true
	return written, nil
}

// removeStaleWeights removes the weight files of dir (model*.safetensors and
// the index) that are not in written: those of an earlier save.
func removeStaleWeights(dir, final string, written map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("save %s: %w", final, err)
	}
	for _, e := range entries {
		n := e.Name()
		isWeights := strings.HasSuffix(n, ".safetensors") && strings.HasPrefix(n, "model")
		if (isWeights || n == IndexFile) && !written[n] {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("save %s: removing stale %s: %w", final, n, err)
			}
		}
	}
	return nil
}

// shardFileName is the Hugging Face name of shard i (0-based) of n.
func shardFileName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// planShards splits ts, in order, into shards of at most maxBytes each (a
// tensor larger than maxBytes gets a shard of its own). maxBytes <= 0 means
// one file.
func planShards(ts []safetensors.Tensor, maxBytes int64) [][]safetensors.Tensor {
	if maxBytes <= 0 {
		return [][]safetensors.Tensor{ts}
	}
	var shards [][]safetensors.Tensor
	var cur []safetensors.Tensor
	var size int64
	for _, t := range ts {
		if len(cur) > 0 && size+t.Bytes() > maxBytes {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.Bytes()
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards
}
