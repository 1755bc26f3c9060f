package model

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"golang.org/x/sys/cpu"
)

// haveAVX2FMA: the CPU (and OS) run the assembly micro-kernel.
var haveAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func haveFastKernel() bool { return haveAVX2FMA }

//go:noescape
func kernel6x16AVX2(k int, a, b, c *float32, ldc int, add bool)

// kernel6x16 is kernel6x16Go, in AVX2/FMA assembly when the CPU has it. The
// slices are checked to hold what the kernel reads and writes.
func kernel6x16(k int, a, b, c []float32, ldc int, add bool) {
	if !haveAVX2FMA {
		kernel6x16Go(k, a, b, c, ldc, add)
		return
	}
	_, _, _ = a[gemmMR*k-1], b[gemmNR*k-1], c[(gemmMR-1)*ldc+gemmNR-1]
	kernel6x16AVX2(k, &a[0], &b[0], &c[0], ldc, add)
}

//go:noescape
func dot4AVX2(k int, a, b0, b1, b2, b3, out *float32)

// dot4 is dot4Go, in AVX2/FMA assembly when the CPU has it.
func dot4(a, b0, b1, b2, b3 []float32, out *[4]float32) {
	if !haveAVX2FMA {
		dot4Go(a, b0, b1, b2, b3, out)
		return
	}
	k := len(a)
	_, _, _, _ = b0[k-1], b1[k-1], b2[k-1], b3[k-1]
	dot4AVX2(k, &a[0], &b0[0], &b1[0], &b2[0], &b3[0], &out[0])
}

// simplego keeps its op executors in an unexported table, filled at init
// with setNodeExecutor(op, priority, fn) and looked up at every node
// execution; it has a priority reserved for user overrides (100) but no
// exported way to register one. The two functions below are simplego's own,
// reached with go:linkname (the Go toolchain restricts that only for the
// standard library); their signatures are those of GoMLX v0.26.0, which
// go.mod pins. If GoMLX changes them, the build fails at link time or
// installFastMatmul's self-check refuses the override.

//go:linkname simplegoSetNodeExecutor github.com/gomlx/gomlx/backends/simplego.setNodeExecutor
func simplegoSetNodeExecutor(op backends.OpType, priority int, fn func(*simplego.Backend, *simplego.Node, []*simplego.Buffer, []bool) (*simplego.Buffer, error))

//go:linkname simplegoExecDotGeneral github.com/gomlx/gomlx/backends/simplego.execDotGeneral
func simplegoExecDotGeneral(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

// simplegoUserPriority is simplego's priority for user overrides.
const simplegoUserPriority = 100

// plainMatmulBackends are the simplego backends created with
// BackendConfig.SimpleGoMatmul: their products stay with simplego.
var plainMatmulBackends sync.Map

// fastMatmulInstalled reports whether fastDotGeneral replaced simplego's
// DotGeneral executor.
var fastMatmulInstalled bool

func init() { installFastMatmul() }

// installFastMatmul makes fastDotGeneral simplego's DotGeneral executor when
// the CPU has AVX2 and FMA and simplego's node layout is the one this file
// reads (checked by readSimpleGoDotParams on a real node).
func installFastMatmul() {
	if !haveAVX2FMA || !simplegoLayoutOK() {
		return
	}
	simplegoSetNodeExecutor(backends.OpTypeDotGeneral, simplegoUserPriority, fastDotGeneral)
	fastMatmulInstalled = true
}

// simplegoLayoutOK builds one DotGeneral node with simplego's builder and
// checks that its parameters read back as built.
func simplegoLayoutOK() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	b, err := simplego.New("")
	if err != nil {
		return false
	}
	defer b.Finalize()
	builder := b.Builder("fast_matmul_check")
	lhs, err := builder.Parameter("lhs", shapes.Make(dtypes.Float32, 2, 3, 5), nil)
	if err != nil {
		return false
	}
	rhs, err := builder.Parameter("rhs", shapes.Make(dtypes.Float32, 2, 7, 5), nil)
	if err != nil {
		return false
	}
	op, err := builder.DotGeneral(lhs, []int{2}, []int{0}, rhs, []int{2}, []int{0})
	if err != nil {
		return false
	}
	// DotGeneral returns a Reshape of the DotGeneral node: its input.
	node, isNode := op.(*simplego.Node)
	if !isNode {
		return false
	}
	inputs := reflectNodeInputs(node)
	if len(inputs) != 1 {
		return false
	}
	p, ok := readSimpleGoDotParams(inputs[0])
	return ok && p.batch == 2 && p.lhsCross == 3 && p.rhsCross == 7 && p.contracting == 5 &&
		fmt.Sprint(p.lhsContracting, p.lhsBatch, p.rhsContracting, p.rhsBatch) == "[2] [0] [2] [0]"
}

// fastDotGeneral is simplego's DotGeneral executor computing float32
// products with matmulNT where canMatmulNT allows; it hands everything else
// (other dtypes, small products in other layouts) to simplego's own. The output
// is simplego's normalized [batch, lhs cross, rhs cross] buffer.
func fastDotGeneral(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
	p, ok := readSimpleGoDotParams(node)
	if !ok {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	if _, plain := plainMatmulBackends.Load(backend); plain {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	lhsShape, err1 := backend.BufferShape(inputs[0])
	rhsShape, err2 := backend.BufferShape(inputs[1])
	lhsData, err3 := backend.BufferData(inputs[0])
	rhsData, err4 := backend.BufferData(inputs[1])
	lhsFlat, ok1 := lhsData.([]float32)
	rhsFlat, ok2 := rhsData.([]float32)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !ok1 || !ok2 {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	A := newOperandView(lhsFlat, lhsShape.Dimensions, p.lhsContracting, p.lhsBatch)
	B := newOperandView(rhsFlat, rhsShape.Dimensions, p.rhsContracting, p.rhsBatch)
	if !canMatmulNT(A, B, p.lhsCross, p.rhsCross) {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	out := backend.NewBuffer(shapes.Make(dtypes.Float32, p.batch, p.lhsCross, p.rhsCross))
	outData, err := backend.BufferData(out)
	if err != nil {
		return nil, fmt.Errorf("fast DotGeneral: %w", err)
	}
	fastMatmulCalls.Add(1)
	matmulNT(A, B, p.batch, p.lhsCross, p.rhsCross, p.contracting, outData.([]float32))
	return out, nil
}

// fastMatmulCalls counts the products fastDotGeneral computed itself (tests).
var fastMatmulCalls atomic.Int64

// fastMatmulFor reports whether backend's float32 products run through fastDotGeneral.
func fastMatmulFor(backend backends.Backend) bool {
	b, ok := backend.(*simplego.Backend)
	if !ok || !fastMatmulInstalled {
		return false
	}
	_, plain := plainMatmulBackends.Load(b)
	return !plain
}

// markPlainMatmul keeps backend's products with simplego's own executor.
func markPlainMatmul(backend backends.Backend) {
	if b, ok := backend.(*simplego.Backend); ok {
		plainMatmulBackends.Store(b, true)
	}
}

// reflectNodeInputs returns the inputs of a simplego node (an unexported
// field, read with reflection).
func reflectNodeInputs(node *simplego.Node) []*simplego.Node {
	f := reflect.ValueOf(node).Elem().FieldByName("inputs")
	if !f.IsValid() || f.Kind() != reflect.Slice {
		return nil
	}
	out := make([]*simplego.Node, f.Len())
	for i := range out {
		out[i] = (*simplego.Node)(f.Index(i).UnsafePointer())
	}
	return out
}
