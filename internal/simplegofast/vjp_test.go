package simplegofast

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// vjpAtInit is the gradient of DotGeneral registered when the test binary
// started: importing this package must not have changed it.
var vjpAtInit = reflect.ValueOf(VJPRegistration[NodeTypeDotGeneral]).Pointer()

// TestImportChangesNothing: before InstallGradient and Install the gradient
// table holds GoMLX's own DotGeneral gradient and no executor is installed.
func TestImportChangesNothing(t *testing.T) {
	if vjpAtInit != reflect.ValueOf(builtinDotGeneralVJP).Pointer() || vjpAtInit == reflect.ValueOf(DotGeneralVJP).Pointer() {
		t.Error("importing simplegofast replaced the gradient of DotGeneral")
	}
}

// TestDotGeneralVJP compares the matmul-based gradient with GoMLX's
// built-in one on products with batch axes, several contracting axes and
// axes in unusual orders.
func TestDotGeneralVJP(t *testing.T) {
	backend, _ := testBackends(t)
	cases := []struct {
		name             string
		lhsDims, rhsDims []int
		lhsC, lhsB       []int
		rhsC, rhsB       []int
	}{
		{"matmul", []int{3, 4}, []int{4, 5}, []int{1}, nil, []int{0}, nil},
		{"hf linear", []int{2, 3, 4}, []int{5, 4}, []int{2}, nil, []int{1}, nil},
		{"attention scores", []int{2, 3, 2, 2, 4}, []int{2, 5, 2, 4}, []int{4}, []int{0, 2}, []int{3}, []int{0, 2}},
		{"two contracting, swapped", []int{3, 2, 4}, []int{4, 5, 3}, []int{0, 2}, nil, []int{2, 0}, nil},
		{"batch last", []int{4, 3, 2}, []int{2, 4, 5}, []int{0}, []int{2}, []int{1}, []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			mk := func(dims []int) *tensors.Tensor {
				n := 1
				for _, d := range dims {
					n *= d
				}
				data := make([]float32, n)
				for i := range data {
					data[i] = float32(rng.NormFloat64())
				}
				return tensors.FromFlatDataAndDimensions(data, dims...)
			}
			a, b := mk(c.lhsDims), mk(c.rhsDims)
			// The axes must be readable, or DotGeneralVJP silently falls back to the built-in gradient.
			MustExecOnce(backend, func(x, y *Node) *Node {
				z := DotGeneral(x, c.lhsC, c.lhsB, y, c.rhsC, c.rhsB)
				ax, ok := readDotAxes(z)
				if !ok || !slices.Equal(ax.lhsContracting, c.lhsC) || !slices.Equal(ax.rhsContracting, c.rhsC) ||
					!slices.Equal(ax.lhsBatch, c.lhsB) || !slices.Equal(ax.rhsBatch, c.rhsB) {
					t.Errorf("readDotAxes = %+v, %v; want %v %v %v %v", ax, ok, c.lhsC, c.lhsB, c.rhsC, c.rhsB)
				}
				return z
			}, a, b)
			grads := func() [][]float32 {
				out := MustExecOnceN(backend, func(x, y *Node) []*Node {
					z := DotGeneral(x, c.lhsC, c.lhsB, y, c.rhsC, c.rhsB)
					w := Sin(IotaFull(x.Graph(), z.Shape())) // a loss with a non-uniform adjoint
					loss := ReduceAllSum(Mul(z, w))
					return Gradient(loss, x, y)
				}, a, b)
				return [][]float32{tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])}
			}
			ours := grads()
			VJPRegistration[NodeTypeDotGeneral] = builtinDotGeneralVJP
			builtin := grads()
			VJPRegistration[NodeTypeDotGeneral] = DotGeneralVJP
			for i := range ours {
				for j := range ours[i] {
					if d := math.Abs(float64(ours[i][j] - builtin[i][j])); d > 1e-4 {
						t.Fatalf("operand %d element %d: %g vs built-in %g", i, j, ours[i][j], builtin[i][j])
					}
				}
			}
		})
	}
}
