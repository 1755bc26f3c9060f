package simplegofast

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestExpFloat32 checks the exponential (AVX2 where the CPU has it) against
// math.Exp: relative error ≤ 3e-7 where the result is normal, 0 below
// ln(2⁻¹²⁶) (math.Exp: subnormal or 0), +Inf above the float32 range, NaN
// for NaN; in place and not, lengths that are not multiples of 8, a block
// of eight with a large lane among ordinary ones.
func TestExpFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	x := []float32{-1e30, -100, -87.5, -87.3, -20, -1, -1e-8, 0, 1e-8, 0.3466, 0.3467, 1, 20, 50, 88.3,
		88.5, 88.7, 89, 1e30, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for i := 0; i < 1000; i++ {
		x = append(x, float32(rng.Float64()*170-85))
	}
	x = append(x, 1, 2, 3) // a tail shorter than 8
	for _, inPlace := range []bool{false, true} {
		dst := make([]float32, len(x))
		src := append([]float32(nil), x...)
		if inPlace {
			dst = src
		}
		expFloat32(dst, src)
		portable := make([]float32, len(x))
		expFloat32Go(portable, x)
		for i, v := range portable {
			if want := float32(math.Exp(float64(x[i]))); v != want && !(math.IsNaN(float64(v)) && math.IsNaN(float64(want))) {
				t.Fatalf("expFloat32Go(%g) = %g, want %g", x[i], v, want)
			}
		}
		for i, v := range x {
			want := math.Exp(float64(v))
			got := float64(dst[i])
			switch {
			case math.IsNaN(float64(v)):
				if !math.IsNaN(got) {
					t.Errorf("exp(NaN) = %g", got)
				}
			case want < 0x1p-126:
				if got != 0 && math.Abs(got-want) > 0x1p-126 {
					t.Errorf("exp(%g) = %g, want 0 or %g", v, got, want)
				}
			case want > math.MaxFloat32:
				if !math.IsInf(got, 1) {
					t.Errorf("exp(%g) = %g, want +Inf", v, got)
				}
			case math.Abs(got-want) > 3e-7*want:
				t.Errorf("exp(%g) = %g, want %g (relative error %.2g)", v, got, want, math.Abs(got-want)/want)
			}
		}
	}
}

// fastOpCase is a graph of elementwise ops on operands of given dimensions.
type fastOpCase struct {
	name string
	dims [][]int
	fn   func(xs []*Node) *Node
	tol  float64 // relative tolerance (0 = 1e-6)
}

var fastOpCases = []fastOpCase{
	{"add, trailing broadcast", [][]int{{4, 5, 6}, {4, 5, 1}}, func(x []*Node) *Node { return Add(x[0], x[1]) }, 0},
	{"sub, leading broadcast", [][]int{{4, 5, 6}, {1, 5, 6}}, func(x []*Node) *Node { return Sub(x[0], x[1]) }, 0},
	{"mul, both broadcast", [][]int{{3, 1, 6}, {1, 5, 1}}, func(x []*Node) *Node { return Mul(x[0], x[1]) }, 0},
	{"div, middle broadcast", [][]int{{2, 3, 4, 5}, {2, 3, 1, 5}}, func(x []*Node) *Node { return Div(x[0], x[1]) }, 0},
	{"div by a scalar", [][]int{{70000}, {}}, func(x []*Node) *Node { return Div(x[0], x[1]) }, 0},
	{"scalar minus", [][]int{{}, {7, 9}}, func(x []*Node) *Node { return Sub(x[0], x[1]) }, 0},
	{"scalar over", [][]int{{}, {7, 9}}, func(x []*Node) *Node { return Div(x[0], Exp(x[1])) }, 0},
	{"same shapes, large", [][]int{{300, 301}, {300, 301}}, func(x []*Node) *Node { return Mul(x[0], x[1]) }, 0},
	{"into an owned input", [][]int{{40, 50}, {40, 1}}, func(x []*Node) *Node { return Sub(Exp(x[0]), x[1]) }, 0},
	{"exp", [][]int{{3, 1001}}, func(x []*Node) *Node { return Exp(x[0]) }, 0},
	{"logistic", [][]int{{3, 1001}}, func(x []*Node) *Node { return Sigmoid(x[0]) }, 0},
	{"exp of masked scores", [][]int{{8, 9}}, func(x []*Node) *Node {
		return Exp(Where(GreaterThan(x[0], ScalarZero(x[0].Graph(), x[0].DType())), x[0], MulScalar(OnesLike(x[0]), -1e30)))
	}, 0},
	// Sums of 7001 terms in float32: simplego adds them in sequence, reduceAxes with four partial sums.
	{"sum, last axis", [][]int{{30, 7001}}, func(x []*Node) *Node { return ReduceSum(x[0], -1) }, 1e-4},
	{"sum, leading axes", [][]int{{4, 5, 6}}, func(x []*Node) *Node { return ReduceSum(x[0], 0, 1) }, 0},
	{"sum, middle axis", [][]int{{4, 5, 6}}, func(x []*Node) *Node { return ReduceSum(x[0], 1) }, 0},
	{"sum, all", [][]int{{4, 5, 6}}, func(x []*Node) *Node { return ReduceAllSum(x[0]) }, 0},
	{"max, last axis", [][]int{{3, 4, 77}}, func(x []*Node) *Node { return ReduceMax(x[0], -1) }, 0},
	{"max, first axis", [][]int{{9, 4, 7}}, func(x []*Node) *Node { return ReduceMax(x[0], 0) }, 0},
	{"broadcast to trailing", [][]int{{4, 1}}, func(x []*Node) *Node { return BroadcastToDims(x[0], 4, 6) }, 0},
	{"broadcast, new axes", [][]int{{5}}, func(x []*Node) *Node { return ExpandAndBroadcast(x[0], []int{3, 5, 2}, []int{0, 2}) }, 0},
	{"broadcast, middle", [][]int{{2, 1, 3}}, func(x []*Node) *Node { return BroadcastToDims(x[0], 2, 4, 3) }, 0},
	{"slice, leading axis", [][]int{{10, 6}}, func(x []*Node) *Node { return Slice(x[0], AxisRange(3, 7)) }, 0},
	{"slice, middle axis", [][]int{{3, 5, 4}}, func(x []*Node) *Node { return Slice(x[0], AxisRange(), AxisRange(1, 4)) }, 0},
	{"slice, inner axis", [][]int{{3, 5, 4}}, func(x []*Node) *Node { return Slice(x[0], AxisRange(1, 3), AxisRange(0, 2), AxisRange(1, 3)) }, 0},
	{"slice, whole", [][]int{{3, 4}}, func(x []*Node) *Node { return Slice(x[0], AxisRange(), AxisRange()) }, 0},
}

// TestFastOpsMatchSimpleGo runs each case on the default backend (this
// package's executors where installed) and on one with SimpleGoOps
// (simplego's own), and compares; where the executors are installed, each
// case must have used them.
func TestFastOpsMatchSimpleGo(t *testing.T) {
	fast, plain := testBackends(t)
	rng := rand.New(rand.NewPCG(2, 3))
	for _, c := range fastOpCases {
		t.Run(c.name, func(t *testing.T) {
			data := make([][]float32, len(c.dims))
			for i, d := range c.dims {
				data[i] = randomFloats(rng, prod(d))
			}
			run := func(backend backends.Backend) []float32 {
				var args []any
				for i, d := range c.dims {
					args = append(args, tensors.FromFlatDataAndDimensions(data[i], d...))
				}
				e := MustNewExec(backend, func(xs []*Node) *Node { return c.fn(xs) })
				return tensors.MustCopyFlatData[float32](e.MustExec(args...)[0])
			}
			calls := fastOpCalls.Load()
			got := run(fast)
			if Installed() && fastOpCalls.Load() == calls {
				t.Error("no op ran through this package's executors")
			}
			calls = fastOpCalls.Load()
			want := run(plain)
			if fastOpCalls.Load() != calls {
				t.Error("this package's executors ran on a backend with SimpleGoOps")
			}
			if len(got) != len(want) {
				t.Fatalf("%d values, simplego %d", len(got), len(want))
			}
			tol := c.tol
			if tol == 0 {
				tol = 1e-6
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("element %d: %g, simplego %g", i, got[i], want[i])
				}
			}
		})
	}
}

// TestReduceAxesRefuses: reduced axes that are not one block are left to
// simplego (nothing written).
func TestReduceAxesRefuses(t *testing.T) {
	out := []float32{-1, -1, -1, -1, -1}
	if reduceAxes(reduceSum, out, make([]float32, 2*5*3), []int{2, 5, 3}, []int{0, 2}) {
		t.Error("reduceAxes accepted axes (0, 2) of [2, 5, 3]")
	}
	if out[0] != -1 {
		t.Error("reduceAxes wrote before refusing")
	}
}

// TestElementwiseLoops checks the elementwise loops (AVX2 where the CPU has
// it) against their portable Go versions, exactly: every binary op on
// vectors and with a scalar on either side, in place and not, and the sum
// and maximum, at lengths around the blocks of 8 and 32; the maximum of a
// run holding a NaN (in a whole block or in the tail) is NaN.
func TestElementwiseLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 257} {
		a, b := randomFloats(rng, n), randomFloats(rng, n)
		for i := range b {
			b[i] += 2 // away from 0: the divisions
		}
		for op := opAdd; op <= opDiv; op++ {
			want := make([]float32, n)
			binaryVecRunGo(op, want, a, b)
			got := make([]float32, n)
			binaryVecRun(op, got, a, b)
			inPlace := append([]float32(nil), a...)
			binaryVecRun(op, inPlace, inPlace, b)
			for i := range want {
				if got[i] != want[i] || inPlace[i] != want[i] {
					t.Fatalf("n=%d op %d: [%d] = %g (in place %g), want %g", n, op, i, got[i], inPlace[i], want[i])
				}
			}
			for _, left := range []bool{false, true} {
				const c = 1.75
				binaryScalarRunGo(op, want, b, c, left)
				binaryScalarRun(op, got, b, c, left)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("n=%d op %d with a scalar (left %v): [%d] = %g, want %g", n, op, left, i, got[i], want[i])
					}
				}
			}
		}
		var sum float64
		for _, v := range a {
			sum += float64(v)
		}
		if got := sumRun(a); math.Abs(float64(got)-sum) > 1e-5*float64(n+1) {
			t.Errorf("n=%d: sum %g, want %g", n, got, sum)
		}
		if got, want := maxRun(a), maxRunGo(a); got != want {
			t.Errorf("n=%d: max %g, want %g", n, got, want)
		}
		for _, at := range []int{0, n / 2, n - 1} {
			if n == 0 {
				break
			}
			x := append([]float32(nil), a...)
			x[at] = float32(math.NaN())
			if got := maxRun(x); !math.IsNaN(float64(got)) {
				t.Errorf("n=%d, NaN at %d: max %g", n, at, got)
			}
		}
	}
}
