package simplegofast

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func randomFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// TestKernels checks the micro-kernels (6×32: AVX-512, or two AVX2 halves,
// where the CPU has them; 6×16: AVX2) and the portable ones against sums in
// float64, overwriting and accumulating, with strided operands and an
// output row stride wider than the tile (the columns beyond it stay
// untouched).
func TestKernels(t *testing.T) {
	type kernel func(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kc := range []struct {
		name  string
		width int
		fn    kernel
	}{
		{"kernel6x32", 32, kernel6x32},
		{"kernel6x32 without AVX-512", 32, func(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
			kernel6x32On(false, k, a, ars, aps, b, bps, c, ldc, add)
		}},
		{"kernel6x32Go", 32, kernel6x32Go}, {"kernel6x16", 16, kernel6x16}, {"kernel6x16Go", 16, kernel6x16Go},
	} {
		ldc := kc.width + 5
		for _, k := range []int{1, 3, 8, 256} {
			for _, add := range []bool{false, true} {
				// a: 6 rows of k at row stride k+3 (rows mode); b: p-major with a stride 3 wider than the tile.
				bps := kc.width + 3
				ars := k + 3
				a, b := randomFloats(rng, gemmMR*ars), randomFloats(rng, bps*k)
				c := randomFloats(rng, gemmMR*ldc)
				before := append([]float32(nil), c...)
				kc.fn(k, a, ars, 1, b, bps, c, ldc, add)
				for r := 0; r < gemmMR; r++ {
					for j := 0; j < ldc; j++ {
						want := float64(before[r*ldc+j])
						if j < kc.width {
							var s float64
							for p := 0; p < k; p++ {
								s += float64(a[r*ars+p]) * float64(b[p*bps+j])
							}
							if add {
								want += s
							} else {
								want = s
							}
						}
						if got := float64(c[r*ldc+j]); math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
							t.Fatalf("%s k=%d add=%v: c[%d][%d] = %g, want %g", kc.name, k, add, r, j, got, want)
						}
					}
				}
			}
		}
	}
}

// dotGeneralCase is one DotGeneral: operand dimensions and axes.
type dotGeneralCase struct {
	name             string
	lhsDims, rhsDims []int
	lhsC, lhsB       []int
	rhsC, rhsB       []int
}

// fastDotGeneralCases have both cross sizes ≥ fastMatmulMinCross, sizes that
// are not multiples of the micro-tile, and every operand layout the model
// produces (and a few it does not).
var fastDotGeneralCases = []dotGeneralCase{
	{"hf linear x·Wᵀ", []int{2, 20, 24}, []int{40, 24}, []int{2}, nil, []int{1}, nil},
	{"weight gradient, contracting rows", []int{24, 20}, []int{24, 33}, []int{0}, nil, []int{0}, nil},
	{"attention scores", []int{2, 17, 2, 2, 8}, []int{2, 19, 2, 8}, []int{4}, []int{0, 2}, []int{3}, []int{0, 2}},
	{"attention values", []int{2, 2, 17, 2, 19}, []int{2, 19, 2, 16}, []int{4}, []int{0, 1}, []int{1}, []int{0, 2}},
	{"two contracting axes, swapped", []int{3, 20, 4}, []int{4, 18, 3}, []int{0, 2}, nil, []int{2, 0}, nil},
	{"contracting longer than a kc block", []int{40, 600}, []int{50, 600}, []int{1}, nil, []int{1}, nil},
	{"batch last", []int{5, 17, 2}, []int{2, 5, 31}, []int{0}, []int{2}, []int{1}, []int{0}},
	{"long rows", []int{20, 1500}, []int{17, 1500}, []int{1}, nil, []int{1}, nil},
	{"contracting rows, long stride", []int{30, 1100}, []int{30, 17}, []int{0}, nil, []int{0}, nil},
	// Small products (dotsNT): decoding shapes.
	{"decode linear", []int{3, 1, 24}, []int{41, 24}, []int{2}, nil, []int{1}, nil},
	{"decode LM head, split", []int{5, 2, 13}, []int{5, 7, 13}, []int{2}, []int{0}, []int{2}, []int{0}},
	{"decode attention scores", []int{2, 1, 2, 2, 8}, []int{2, 19, 2, 8}, []int{4}, []int{0, 2}, []int{3}, []int{0, 2}},
	{"one column", []int{30, 9}, []int{1, 9}, []int{1}, nil, []int{1}, nil},
	{"decode attention values (axpyNT)", []int{2, 2, 1, 2, 19}, []int{2, 19, 2, 8}, []int{4}, []int{0, 1}, []int{1}, []int{0, 2}},
}

// TestDot4 checks dot4 (assembly where the CPU has AVX2 and FMA) and the
// portable dot4Go against sums in float64, for lengths around its 8-wide
// steps.
func TestDot4(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range []int{1, 7, 8, 9, 64, 100} {
		a := randomFloats(rng, k)
		bs := [4][]float32{randomFloats(rng, k), randomFloats(rng, k), randomFloats(rng, k), randomFloats(rng, k)}
		for name, dot := range map[string]func(a, b0, b1, b2, b3 []float32, out *[4]float32){"dot4": dot4, "dot4Go": dot4Go} {
			var got [4]float32
			dot(a, bs[0], bs[1], bs[2], bs[3], &got)
			for r := range bs {
				var want float64
				for p := range a {
					want += float64(a[p]) * float64(bs[r][p])
				}
				if math.Abs(float64(got[r])-want) > 1e-4*(1+math.Abs(want)) {
					t.Errorf("%s k=%d row %d: %g, want %g", name, k, r, got[r], want)
				}
			}
		}
	}
}

// TestDot2x4 checks dot2x4 (assembly where the CPU has AVX2 and FMA) and
// the portable dot2x4Go against sums in float64, for lengths around its
// 8-wide steps.
func TestDot2x4(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 8))
	for _, k := range []int{1, 7, 8, 9, 64, 100} {
		as := [2][]float32{randomFloats(rng, k), randomFloats(rng, k)}
		bs := [4][]float32{randomFloats(rng, k), randomFloats(rng, k), randomFloats(rng, k), randomFloats(rng, k)}
		for name, dot := range map[string]func(a0, a1, b0, b1, b2, b3 []float32, out *[8]float32){"dot2x4": dot2x4, "dot2x4Go": dot2x4Go} {
			var got [8]float32
			dot(as[0], as[1], bs[0], bs[1], bs[2], bs[3], &got)
			for i := range as {
				for r := range bs {
					var want float64
					for p := range as[i] {
						want += float64(as[i][p]) * float64(bs[r][p])
					}
					if g := got[4*i+r]; math.Abs(float64(g)-want) > 1e-4*(1+math.Abs(want)) {
						t.Errorf("%s k=%d row %d, %d: %g, want %g", name, k, i, r, g, want)
					}
				}
			}
		}
	}
}

// TestMatmulNT checks the packed product and the small-product path against
// a float64 triple loop over each case's operand views.
func TestMatmulNT(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range fastDotGeneralCases {
		t.Run(c.name, func(t *testing.T) {
			a, b := randomFloats(rng, prod(c.lhsDims)), randomFloats(rng, prod(c.rhsDims))
			A := newOperandView(a, c.lhsDims, c.lhsC, c.lhsB)
			B := newOperandView(b, c.rhsDims, c.rhsC, c.rhsB)
			batch, M, N, K := len(A.bOff), len(A.iOff), len(B.iOff), len(A.pOff)
			if !canMatmulNT(A, B, M, N) {
				t.Fatal("canMatmulNT refuses the case")
			}
			out := make([]float32, batch*M*N)
			matmulNT(A, B, batch, M, N, K, out)
			for bi := 0; bi < batch; bi++ {
				for i := 0; i < M; i++ {
					for j := 0; j < N; j++ {
						var s float64
						for p := 0; p < K; p++ {
							s += float64(a[A.bOff[bi]+A.iOff[i]+A.pOff[p]]) * float64(b[B.bOff[bi]+B.iOff[j]+B.pOff[p]])
						}
						if got := float64(out[(bi*M+i)*N+j]); math.Abs(got-s) > 1e-4*(1+math.Abs(s)) {
							t.Fatalf("out[%d, %d, %d] = %g, want %g", bi, i, j, got, s)
						}
					}
				}
			}
		})
	}
}

// TestOperandView pins the offsets of a view with non-adjacent batch axes
// and contracting axes out of order, computed by hand.
func TestOperandView(t *testing.T) {
	// dims [2, 3, 4, 5] (strides 60, 20, 5, 1): batch axes (2, 0), contracting (3, 1), cross none.
	v := newOperandView(nil, []int{2, 3, 4, 5}, []int{3, 1}, []int{2, 0})
	wantB := []int{0, 60, 5, 65, 10, 70, 15, 75}               // b = (axis2, axis0)
	wantP := []int{0, 20, 40, 1, 21, 41, 2, 22, 42, 3, 23, 43} // first 12 of p = (axis3, axis1)
	if !slices.Equal(v.bOff, wantB) || !slices.Equal(v.pOff[:12], wantP) || !slices.Equal(v.iOff, []int{0}) {
		t.Errorf("offsets b %v p %v i %v", v.bOff, v.pOff[:12], v.iOff)
	}
	if uniformStride([]int{3, 5, 7}) != 2 || uniformStride([]int{0, 1, 3}) != 0 || uniformStride([]int{4}) != 1 {
		t.Error("uniformStride")
	}
}

// TestFastDotGeneral runs each case through a GoMLX graph on the default
// backend (the packed product) and on one with SimpleGoOps (simplego's
// own executor), and compares; on amd64 with AVX2 it also checks that the
// packed product was installed and did the work.
func TestFastDotGeneral(t *testing.T) {
	fast, plain := testBackends(t) // installs
	if runtime.GOARCH == "amd64" && haveFastKernel() && fastKernelsBuilt && !Installed() {
		t.Fatal("the CPU has AVX2 and FMA but the packed product was not installed")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range fastDotGeneralCases {
		t.Run(c.name, func(t *testing.T) {
			a, b := randomFloats(rng, prod(c.lhsDims)), randomFloats(rng, prod(c.rhsDims))
			run := func(backend backends.Backend) []float32 { // fresh tensors: a tensor belongs to one backend
				return tensors.MustCopyFlatData[float32](MustExecOnce(backend, func(x, y *Node) *Node {
					return DotGeneral(x, c.lhsC, c.lhsB, y, c.rhsC, c.rhsB)
				}, tensors.FromFlatDataAndDimensions(a, c.lhsDims...), tensors.FromFlatDataAndDimensions(b, c.rhsDims...)))
			}
			calls := fastMatmulCalls.Load()
			got := run(fast)
			if Installed() && fastMatmulCalls.Load() == calls {
				t.Error("the packed product did not run")
			}
			calls = fastMatmulCalls.Load()
			want := run(plain)
			if fastMatmulCalls.Load() != calls {
				t.Error("the packed product ran on a backend with SimpleGoOps")
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("element %d: %g, simplego %g", i, got[i], want[i])
				}
			}
		})
	}
}

func prod(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}
