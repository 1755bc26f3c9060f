package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model/checkpoint"
)

// logitsThrough returns the float32 logits [B·L·V] of ids (no padding) computed through ctx: the
// model's context, or WithoutAdapter of it.
func logitsThrough(t *testing.T, m *Model, ctx *context.Context, ids [][]int32) []float32 {
	t.Helper()
	mask := make([][]int32, len(ids))
	for i, row := range ids {
		mask[i] = make([]int32, len(row))
		for j := range row {
			mask[i][j] = 1
		}
	}
	e, err := context.NewExec(m.backend, ctx.Reuse(), func(ctx *context.Context, tokens, mask *Node) *Node {
		return m.Logits(ctx, tokens, mask)
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Exec(ids, mask)
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](res[0])
}

var loraIDs = [][]int32{{5, 17, 42, 99, 3, 200, 7}, {1, 2, 3, 4, 5, 6, 7}}

// randomizeB gives every B of m's adapter random values of scale std (B starts at zero, where
// the adapter changes nothing).
func randomizeB(t *testing.T, m *Model, seed uint64, std float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, s := range adapterSpecs(&m.cfg, m.lora.targets) {
		values := make([]float32, s.out*m.lora.cfg.Rank)
		for i := range values {
			values[i] = float32(rng.NormFloat64() * std)
		}
		v := m.ctx.GetVariableByScopeAndName(adapterVarPath(s.module, "B"))
		if err := v.SetValue(m.fromFloat32(values, s.out, m.lora.cfg.Rank)); err != nil {
			t.Fatal(err)
		}
	}
}

func loraConfig(rank int) LoRAConfig {
	c := DefaultLoRAConfig()
	c.Rank, c.Alpha = rank, 16
	return c
}

// TestAdapterStartsAtTheBase: a new adapter (A Kaiming-uniform within ±1/√in, B zero) leaves
// the logits bit for bit the base's, in float32 and bfloat16; once B has moved the logits
// differ, and through WithoutAdapter they are the base's again, bit for bit.
func TestAdapterStartsAtTheBase(t *testing.T) {
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			m, err := New(testBackend(t), testConfig(), 3, dt)
			if err != nil {
				t.Fatal(err)
			}
			base := logitsThrough(t, m, m.Context(), loraIDs)
			if err := m.AddAdapter(loraConfig(4), 7, t.TempDir()); err != nil {
				t.Fatal(err)
			}
			for _, s := range adapterSpecs(&m.cfg, m.lora.targets) {
				a, b, err := m.adapterValues(s.module)
				if err != nil {
					t.Fatal(err)
				}
				bound := 1 / math.Sqrt(float64(s.in))
				var maxA float64
				for _, x := range a {
					maxA = max(maxA, math.Abs(float64(x)))
				}
				if maxA == 0 || maxA > bound*1.004 { // bfloat16 rounding
					t.Errorf("%s: max |A| %g, want in (0, %g]", s.module, maxA, bound)
				}
				for _, x := range b {
					if x != 0 {
						t.Fatalf("%s: B is not zero", s.module)
					}
				}
			}
			if got := logitsThrough(t, m, m.Context(), loraIDs); !equalBits(got, base) {
				t.Fatal("a new adapter changed the logits")
			}
			randomizeB(t, m, 1, 0.05)
			if got := logitsThrough(t, m, m.Context(), loraIDs); equalBits(got, base) {
				t.Fatal("an adapter with B ≠ 0 left the logits unchanged")
			}
			if got := logitsThrough(t, m, WithoutAdapter(m.Context()), loraIDs); !equalBits(got, base) {
				t.Fatal("WithoutAdapter: logits differ from the base's")
			}
		})
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] == 0 && b[i] == 0) {
			return false
		}
	}
	return true
}

// mergeByHand returns W + s·B·A for the row-major w [out, in], b [out, r], a [r, in], written
// out here as a triple loop in float64.
func mergeByHand(w, a, b []float32, out, in, r int, s float64) []float32 {
	res := make([]float32, len(w))
	for o := range out {
		for i := range in {
			var d float64
			for k := range r {
				d += float64(b[o*r+k]) * float64(a[k*in+i])
			}
			res[o*in+i] = float32(float64(w[o*in+i]) + s*d)
		}
	}
	return res
}

// TestAdapterEqualsMergedWeights: the forward with an adapter (B moved off zero, rank 4, α 16,
// every target) equals, within 1e-5, a plain model whose weights are W + s·B·A merged by hand;
// MergeAdapter writes those weights (within a float32 rounding) and removes the adapter. With
// rsLoRA the same holds with s = α/√r.
func TestAdapterEqualsMergedWeights(t *testing.T) {
	for _, rs := range []bool{false, true} {
		m := newTestModel(t, testConfig(), 3)
		cfg := loraConfig(4)
		cfg.RSLoRA = rs
		if err := m.AddAdapter(cfg, 7, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		randomizeB(t, m, 2, 0.05)
		got := logitsThrough(t, m, m.Context(), loraIDs)

		s := 16.0 / 4
		if rs {
			s = 16.0 / 2
		}
		plain := newTestModel(t, testConfig(), 3)
		want := map[string][]float32{}
		for _, sp := range adapterSpecs(&m.cfg, m.lora.targets) {
			a, b, err := m.adapterValues(sp.module)
			if err != nil {
				t.Fatal(err)
			}
			w, _ := plain.weightTensor(sp.module + ".weight")
			want[sp.module] = mergeByHand(hostFloat32(w), a, b, sp.out, sp.in, 4, s)
			v := plain.ctx.GetVariableByScopeAndName(varPath(sp.module + ".weight"))
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(want[sp.module], sp.out, sp.in)); err != nil {
				t.Fatal(err)
			}
		}
		ref := logitsThrough(t, plain, plain.Context(), loraIDs)
		var worst float64
		for i := range ref {
			worst = max(worst, math.Abs(float64(got[i]-ref[i])))
		}
		if worst > 1e-5 {
			t.Errorf("rslora %v: max |Δ logits| %g between the adapter and the merged weights", rs, worst)
		}

		if err := m.MergeAdapter(); err != nil {
			t.Fatal(err)
		}
		if m.Adapter() != nil {
			t.Fatal("MergeAdapter left the adapter")
		}
		for module, w := range want {
			merged, _ := m.weightTensor(module + ".weight")
			for i, x := range hostFloat32(merged) {
				if d := math.Abs(float64(x - w[i])); d > 1e-6*math.Max(1, math.Abs(float64(w[i]))) {
					t.Fatalf("rslora %v: merged %s[%d] = %v, by hand %v", rs, module, i, x, w[i])
				}
			}
		}
	}
}

// TestLoRAScaling: a linear projection with an adapter computes x·Wᵀ + s·(x·Aᵀ)·Bᵀ with
// s = α/r, or α/√r with rsLoRA, against the sums written out here (r 4, α 6: s 1.5 or 3).
func TestLoRAScaling(t *testing.T) {
	for _, c := range []struct {
		rslora bool
		scale  float64
	}{{false, 1.5}, {true, 3}} {
		cfg := LoRAConfig{Rank: 4, Alpha: 6, Targets: []string{"q_proj"}, RSLoRA: c.rslora}
		if cfg.Scale() != c.scale {
			t.Fatalf("rslora %v: Scale %v, want %v", c.rslora, cfg.Scale(), c.scale)
		}
		m := newTestModel(t, testConfig(), 3)
		if err := m.AddAdapter(cfg, 7, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		randomizeB(t, m, 3, 0.3)
		module := "model.layers.1.self_attn.q_proj"
		a, b, _ := m.adapterValues(module)
		wt, _ := m.weightTensor(module + ".weight")
		w := hostFloat32(wt)
		out, in, r := 32, 32, 4
		rng := rand.New(rand.NewPCG(4, 4))
		x := make([]float32, 3*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		e, err := context.NewExec(m.backend, m.ctx.Reuse(), func(ctx *context.Context, x *Node) *Node {
			return m.linear(ctx, x, module)
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Exec(tensors.FromFlatDataAndDimensions(x, 3, in))
		if err != nil {
			t.Fatal(err)
		}
		got := tensors.MustCopyFlatData[float32](res[0])
		for n := range 3 {
			for o := range out {
				var base, lora float64
				for i := range in {
					base += float64(x[n*in+i]) * float64(w[o*in+i])
				}
				for k := range r {
					var xa float64
					for i := range in {
						xa += float64(x[n*in+i]) * float64(a[k*in+i])
					}
					lora += xa * float64(b[o*r+k])
				}
				want := base + c.scale*lora
				if d := math.Abs(float64(got[n*out+o]) - want); d > 1e-5 {
					t.Fatalf("rslora %v: y[%d,%d] = %v, want %v", c.rslora, n, o, got[n*out+o], want)
				}
			}
		}
		if c.scale*math.Abs(lastLoRA(x, a, b, in, r)) < 1e-3 {
			t.Fatal("the adapter's term is too small for the test to see the scale")
		}
	}
}

// lastLoRA is (x·Aᵀ)·Bᵀ of the last row of x at output 0: a size check of the adapter's term.
func lastLoRA(x, a, b []float32, in, r int) float64 {
	n := len(x)/in - 1
	var lora float64
	for k := range r {
		var xa float64
		for i := range in {
			xa += float64(x[n*in+i]) * float64(a[k*in+i])
		}
		lora += xa * float64(b[k])
	}
	return lora
}

// TestLoRAConfigValidate: the model.lora keys' errors name the key.
func TestLoRAConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  LoRAConfig
		want string
	}{
		{LoRAConfig{}, ""},
		{LoRAConfig{Rank: -1}, "lora.rank must be >= 0"},
		{LoRAConfig{Rank: 8, Alpha: 0, Targets: []string{"q_proj"}}, "lora.alpha"},
		{LoRAConfig{Rank: 8, Alpha: 16}, "lora.targets is empty"},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"lm_head"}}, `"lm_head" is not one of`},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "q_proj"}}, "given twice"},
		{LoRAConfig{Rank: 8, Alpha: 16, Targets: checkpoint.AllLinear}, ""},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}
