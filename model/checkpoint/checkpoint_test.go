package checkpoint

import (
	"os"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/safetensors"
)

// f32 is a float32 tensor of n elements, stored as F32 (4n bytes).
func f32(name string, values ...float32) safetensors.Tensor {
	return safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: []int{len(values)},
		Src: tensors.FromFlatDataAndDimensions(values, len(values))}
}

// TestPlanShards: tensors stay in order, a shard holds at most max bytes
// unless one tensor alone is larger, and max <= 0 is one shard.
func TestPlanShards(t *testing.T) {
	ts := []safetensors.Tensor{f32("a", 1, 2), f32("b", 3, 4), f32("c", 5, 6, 7, 8), f32("d", 9)} // 8, 8, 16, 4 bytes
	for _, c := range []struct {
		max  int64
		want [][]string
	}{
		{0, [][]string{{"a", "b", "c", "d"}}},
		{-1, [][]string{{"a", "b", "c", "d"}}},
		{16, [][]string{{"a", "b"}, {"c"}, {"d"}}},
		{20, [][]string{{"a", "b"}, {"c", "d"}}},
		{4, [][]string{{"a"}, {"b"}, {"c"}, {"d"}}},
	} {
		var got [][]string
		for _, shard := range planShards(ts, c.max) {
			var names []string
			for _, t := range shard {
				names = append(names, t.Name)
			}
			got = append(got, names)
		}
		if !slices.EqualFunc(got, c.want, slices.Equal) {
			t.Errorf("max %d: shards %v, want %v", c.max, got, c.want)
		}
	}
}

// TestWriteThenOpen writes the same weights as one file, as shards, and
// as one file again: each time OpenWeights finds every tensor with its
// values, and no weight file of the earlier write is left.
func TestWriteThenOpen(t *testing.T) {
	dir := t.TempDir() + "/ckpt"
	ts := []safetensors.Tensor{f32("a", 1, 2), f32("b", 3, 4), f32("c", 5, 6, 7, 8)}
	want := map[string][]float32{"a": {1, 2}, "b": {3, 4}, "c": {5, 6, 7, 8}}
	for _, c := range []struct {
		max   int64
		files []string
	}{
		{0, []string{"config.json", "model.safetensors", "tokenizer.json"}},
		{16, []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
			"model.safetensors.index.json", "tokenizer.json"}},
		{0, []string{"config.json", "model.safetensors", "tokenizer.json"}},
	} {
		err := Write(dir, Contents{Weights: ts, MaxShardBytes: c.max, Files: map[string][]byte{"config.json": []byte("{}")},
			Tokenizer: TokenizerFiles{"tokenizer.json": []byte("{}"), "not-a-tokenizer-file": nil}})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		if !slices.Equal(files, c.files) {
			t.Errorf("max %d: files %v, want %v", c.max, files, c.files)
		}
		w, err := OpenWeights(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("max %d: tensors %v", c.max, got)
		}
		for name, values := range want {
			dst := tensors.FromShape(shapes.Make(dtypes.Float32, len(values)))
			if err := w.ReadInto(name, dst); err != nil {
				t.Fatal(err)
			}
			if got := tensors.MustCopyFlatData[float32](dst); !slices.Equal(got, values) {
				t.Errorf("max %d: %s = %v, want %v", c.max, name, got, values)
			}
		}
		w.Close()
	}
}
