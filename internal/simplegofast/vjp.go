package simplegofast

import (
	"reflect"
	"slices"
	"sync"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// DotGeneral's gradient as two DotGenerals (dA = dC·Bᵀ, dB = Aᵀ·dC, axes
// mapped back): GoMLX v0.26's builds the products elementwise over the
// operands' outer product, 11× slower on the pure-Go backend
// (docs/model.md). InstallGradient registers it for every DotGeneral of
// every graph built afterwards in the process.

// builtinDotGeneralVJP is GoMLX's own gradient, kept as a fallback.
var builtinDotGeneralVJP = VJPRegistration[NodeTypeDotGeneral]

var gradientOnce sync.Once

// InstallGradient registers DotGeneralVJP as the gradient of DotGeneral in
// GoMLX's process-wide table (graph.VJPRegistration), once; graphs built
// before the call keep the built-in gradient. It is backend-independent:
// backend.New (model/backend) calls it for every backend.
func InstallGradient() {
	gradientOnce.Do(func() { VJPRegistration[NodeTypeDotGeneral] = DotGeneralVJP })
}

// dotAxes are the axes parameters of a DotGeneral node.
type dotAxes struct {
	lhsContracting, lhsBatch, rhsContracting, rhsBatch []int
}

// readDotAxes reads the axes of a DotGeneral node. GoMLX keeps them in
// unexported fields (v0.26: node.inputs.(*nodeInputsDotGeneral)); they are
// read with reflection, which may read unexported integer fields. ok is false
// when the layout is not the expected one (another GoMLX version), and the
// caller falls back to the built-in gradient.
func readDotAxes(node *Node) (ax dotAxes, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	v := reflect.ValueOf(node).Elem().FieldByName("inputs")
	if !v.IsValid() || v.IsNil() {
		return ax, false
	}
	v = v.Elem()
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	ints := func(name string) ([]int, bool) {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Slice {
			return nil, false
		}
		out := make([]int, f.Len())
		for i := range out {
			out[i] = int(f.Index(i).Int())
		}
		return out, true
	}
	var ok1, ok2, ok3, ok4 bool
	ax.lhsContracting, ok1 = ints("lhsContractingAxes")
	ax.lhsBatch, ok2 = ints("lhsBatchAxes")
	ax.rhsContracting, ok3 = ints("rhsContractingAxes")
	ax.rhsBatch, ok4 = ints("rhsBatchAxes")
	return ax, ok1 && ok2 && ok3 && ok4
}

// crossAxes lists, in order, the axes of a rank-r operand that are neither
// contracting nor batch.
func crossAxes(rank int, contracting, batch []int) []int {
	var out []int
	for a := 0; a < rank; a++ {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			out = append(out, a)
		}
	}
	return out
}

func iotaInts(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// DotGeneralVJP is the matmul-based gradient of a DotGeneral node, in the
// form of graph.VJP. The output C of DotGeneral(A, B) has axes [batch…,
// A-cross…, B-cross…]; with adjoint V of that shape:
//
//	dA = DotGeneral(V, B) contracting V's B-cross axes with B's cross axes, batch on batch
//	     → [batch…, A-cross…, B-contracting (in B's axis order)…], then transposed into A's axis order;
//	dB = DotGeneral(V, A) contracting V's A-cross axes with A's cross axes, batch on batch
//	     → [batch…, B-cross…, A-contracting (in A's axis order)…], then transposed into B's axis order.
func DotGeneralVJP(node *Node, vjps []*Node, outputShape shapes.Shape) []*Node {
	ax, ok := readDotAxes(node)
	if !ok {
		return builtinDotGeneralVJP(node, vjps, outputShape)
	}
	v := vjps[0]
	lhs, rhs := node.Inputs()[0], node.Inputs()[1]
	lhsCross := crossAxes(lhs.Rank(), ax.lhsContracting, ax.lhsBatch)
	rhsCross := crossAxes(rhs.Rank(), ax.rhsContracting, ax.rhsBatch)
	nb, nlc, nrc := len(ax.lhsBatch), len(lhsCross), len(rhsCross)
	vBatch := iotaInts(0, nb)
	vLhsCross := iotaInts(nb, nlc)
	vRhsCross := iotaInts(nb+nlc, nrc)

	// dA: [batch…, A-cross…, B-contracting sorted…]
	dl := DotGeneral(v, vRhsCross, vBatch, rhs, rhsCross, ax.rhsBatch)
	lhsPerm := make([]int, lhs.Rank())
	for i, a := range ax.lhsBatch {
		lhsPerm[a] = i
	}
	for i, a := range lhsCross {
		lhsPerm[a] = nb + i
	}
	rhsContractingSorted := slices.Sorted(slices.Values(ax.rhsContracting))
	for k, r := range rhsContractingSorted {
		i := slices.Index(ax.rhsContracting, r)
		lhsPerm[ax.lhsContracting[i]] = nb + nlc + k
	}
	dLhs := transposeIfNeeded(dl, lhsPerm)

	// dB: DotGeneral(V, A) → [batch…, B-cross…, A-contracting sorted…]: for the
	// usual x·Wᵀ with W [out, in] that is already W's layout (no transpose).
	dr := DotGeneral(v, vLhsCross, vBatch, lhs, lhsCross, ax.lhsBatch)
	rhsPerm := make([]int, rhs.Rank())
	for i, a := range ax.rhsBatch {
		rhsPerm[a] = i
	}
	for i, a := range rhsCross {
		rhsPerm[a] = nb + i
	}
	lhsContractingSorted := slices.Sorted(slices.Values(ax.lhsContracting))
	for k, l := range lhsContractingSorted {
		i := slices.Index(ax.lhsContracting, l)
		rhsPerm[ax.rhsContracting[i]] = nb + nrc + k
	}
	dRhs := transposeIfNeeded(dr, rhsPerm)
	return []*Node{dLhs, dRhs}
}

// transposeIfNeeded returns x with output axis i taken from x's axis perm[i].
func transposeIfNeeded(x *Node, perm []int) *Node {
	for i, p := range perm {
		if i != p {
			return TransposeAllAxes(x, perm...)
		}
	}
	return x
}
