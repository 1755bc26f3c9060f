package simplegofast

// Installing matmul.go's product and elementwise.go's ops as executors of
// GoMLX's pure-Go backend (simplego), on amd64 CPUs with AVX2 and FMA
// (Install, install.go).
//
// simplego keeps its op executors in an unexported table, filled at init
// with setNodeExecutor(op, priority, fn) and looked up at every node
// execution; it reserves a priority for user overrides (100) but has no
// exported way to register one. setNodeExecutor and the executors it falls
// back to are simplego's own functions, reached with go:linkname (the Go
// toolchain restricts that only for the standard library), with the
// signatures of GoMLX v0.26.0, which go.mod pins: if GoMLX changes them the
// build fails at link time. What the executors read from simplego's nodes
// (unexported fields, with reflection) is checked at every call — DotGeneral's
// layout also once at install time on a real node — and anything unexpected
// (another layout, another dtype, a shape they do not handle) goes to
// simplego's own executor. Backends marked with KeepPlain always use
// simplego's own.

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	_ "unsafe" // go:linkname

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"golang.org/x/sys/cpu"
)

// haveAVX2FMA: the CPU (and OS) run the assembly kernels.
var haveAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// haveAVX512: the CPU (and OS) also run the AVX-512 micro-kernel.
var haveAVX512 = haveAVX2FMA && cpu.X86.HasAVX512F

func haveFastKernel() bool { return haveAVX2FMA }

//go:noescape
func kernel6x16AVX2(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, add bool)

// kernel6x16 is kernel6x16Go, in AVX2/FMA assembly when the CPU has it. The
// slices are checked to hold what the kernel reads and writes.
func kernel6x16(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	if !haveAVX2FMA {
		kernel6x16Go(k, a, ars, aps, b, bps, c, ldc, add)
		return
	}
	_, _, _ = a[(gemmMR-1)*ars+(k-1)*aps], b[(k-1)*bps+15], c[(gemmMR-1)*ldc+15]
	kernel6x16AVX2(k, &a[0], ars, aps, &b[0], bps, &c[0], ldc, add)
}

//go:noescape
func kernel6x32AVX512(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, add bool)

// kernel6x32 is kernel6x32Go: in AVX-512 assembly when the CPU has it, else
// as two AVX2 6×16 halves, else in Go. The slices are checked to hold what
// the kernel reads and writes.
func kernel6x32(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	kernel6x32On(haveAVX512, k, a, ars, aps, b, bps, c, ldc, add)
}

// kernel6x32On is kernel6x32 with AVX-512 used only when avx512 is true
// (tests run the AVX2 halves on a CPU that has AVX-512).
func kernel6x32On(avx512 bool, k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	if !haveAVX2FMA {
		kernel6x32Go(k, a, ars, aps, b, bps, c, ldc, add)
		return
	}
	_, _, _ = a[(gemmMR-1)*ars+(k-1)*aps], b[(k-1)*bps+gemmNR-1], c[(gemmMR-1)*ldc+gemmNR-1]
	if avx512 && haveAVX512 {
		kernel6x32AVX512(k, &a[0], ars, aps, &b[0], bps, &c[0], ldc, add)
		return
	}
	kernel6x16AVX2(k, &a[0], ars, aps, &b[0], bps, &c[0], ldc, add)
	kernel6x16AVX2(k, &a[0], ars, aps, &b[16], bps, &c[16], ldc, add)
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

//go:noescape
func dot2x4AVX2(k int, a0, a1, b0, b1, b2, b3 *float32, out *[8]float32)

// dot2x4 is dot2x4Go, in AVX2/FMA assembly when the CPU has it (whole blocks
// of 8 contracting steps; the rest here).
func dot2x4(a0, a1, b0, b1, b2, b3 []float32, out *[8]float32) {
	k := len(a0)
	k8 := k &^ 7
	if !haveAVX2FMA || k8 == 0 {
		dot2x4Go(a0, a1, b0, b1, b2, b3, out)
		return
	}
	_, _, _, _, _ = a1[k-1], b0[k-1], b1[k-1], b2[k-1], b3[k-1]
	dot2x4AVX2(k8, &a0[0], &a1[0], &b0[0], &b1[0], &b2[0], &b3[0], out)
	if k8 < k {
		var rest [8]float32
		dot2x4Go(a0[k8:], a1[k8:k], b0[k8:k], b1[k8:k], b2[k8:k], b3[k8:k], &rest)
		for i := range out {
			out[i] += rest[i]
		}
	}
}

//go:noescape
func axpyAVX2(dst, x *float32, a float32, n int)

// axpy is axpyGo, in AVX2/FMA assembly when the CPU has it (whole blocks of
// 8; the rest here).
func axpy(dst, x []float32, a float32) {
	n8 := len(dst) &^ 7
	if !haveAVX2FMA || n8 == 0 {
		axpyGo(dst, x, a)
		return
	}
	x = x[:len(dst)]
	axpyAVX2(&dst[0], &x[0], a, n8)
	axpyGo(dst[n8:], x[n8:], a)
}

//go:noescape
func expAVX2(dst, x *float32, n int) (done int)

// expFloat32 is dst[i] = exp(x[i]) (dst may be x): the AVX2 exponential
// where the CPU has it, math.Exp for the blocks it leaves and the last
// elements.
func expFloat32(dst, x []float32) {
	x = x[:len(dst)]
	if !haveAVX2FMA {
		expFloat32Go(dst, x)
		return
	}
	i := 0
	for len(dst)-i >= 8 {
		i += expAVX2(&dst[i], &x[i], len(dst)-i)
		if len(dst)-i >= 8 { // stopped at a block with a large or NaN lane
			expFloat32Go(dst[i:i+8], x[i:i+8])
			i += 8
		}
	}
	expFloat32Go(dst[i:], x[i:])
}

// simplegoExecutor is the type of simplego's op executors.
type simplegoExecutor = func(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoSetNodeExecutor github.com/gomlx/gomlx/backends/simplego.setNodeExecutor
func simplegoSetNodeExecutor(op backends.OpType, priority int, fn simplegoExecutor)

//go:linkname simplegoExecDotGeneral github.com/gomlx/gomlx/backends/simplego.execDotGeneral
func simplegoExecDotGeneral(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecAdd github.com/gomlx/gomlx/backends/simplego.execAdd
func simplegoExecAdd(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecSub github.com/gomlx/gomlx/backends/simplego.execSub
func simplegoExecSub(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecMul github.com/gomlx/gomlx/backends/simplego.execMul
func simplegoExecMul(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecDiv github.com/gomlx/gomlx/backends/simplego.execDiv
func simplegoExecDiv(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecExp github.com/gomlx/gomlx/backends/simplego.execExp
func simplegoExecExp(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecLogistic github.com/gomlx/gomlx/backends/simplego.execLogistic
func simplegoExecLogistic(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecReduce github.com/gomlx/gomlx/backends/simplego.execReduce
func simplegoExecReduce(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecBroadcastInDim github.com/gomlx/gomlx/backends/simplego.execBroadcastInDim
func simplegoExecBroadcastInDim(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecSlice github.com/gomlx/gomlx/backends/simplego.execSlice
func simplegoExecSlice(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

// simplegoUserPriority is simplego's priority for user overrides.
const simplegoUserPriority = 100

// fastMatmulCalls counts the products fastDotGeneral computed itself, and
// fastOpCalls the elementwise ops computed here (tests).
var fastMatmulCalls, fastOpCalls atomic.Int64

// install makes this file's executors simplego's when the CPU has AVX2 and
// FMA and simplego's DotGeneral node layout is the one readSimpleGoDotParams
// reads.
func install() error {
	if !haveAVX2FMA {
		return fmt.Errorf("%w: the CPU lacks AVX2 or FMA", ErrUnsupported)
	}
	if !simplegoLayoutOK() {
		return errors.New("simplegofast: simplego's DotGeneral node does not have GoMLX v0.26.0's layout (another GoMLX version?)")
	}
	set := func(op backends.OpType, fn simplegoExecutor) { simplegoSetNodeExecutor(op, simplegoUserPriority, fn) }
	set(backends.OpTypeDotGeneral, fastDotGeneral)
	set(backends.OpTypeAdd, fastBinary(opAdd, simplegoExecAdd))
	set(backends.OpTypeSub, fastBinary(opSub, simplegoExecSub))
	set(backends.OpTypeMul, fastBinary(opMul, simplegoExecMul))
	set(backends.OpTypeDiv, fastBinary(opDiv, simplegoExecDiv))
	set(backends.OpTypeExp, fastUnary(expFloat32, simplegoExecExp))
	set(backends.OpTypeLogistic, fastUnary(logisticFloat32, simplegoExecLogistic))
	set(backends.OpTypeReduceSum, fastReduce(reduceSum))
	set(backends.OpTypeReduceMax, fastReduce(reduceMax))
	set(backends.OpTypeBroadcastInDim, fastBroadcastInDim)
	set(backends.OpTypeSlice, fastSlice)
	return nil
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
	builder := b.Builder("fast_ops_check")
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
	inputs, _ := nodeInputs(node)
	if len(inputs) != 1 {
		return false
	}
	p, ok := readSimpleGoDotParams(inputs[0])
	return ok && p.batch == 2 && p.lhsCross == 3 && p.rhsCross == 7 && p.contracting == 5 &&
		fmt.Sprint(p.lhsContracting, p.lhsBatch, p.rhsContracting, p.rhsBatch) == "[2] [0] [2] [0]"
}

// float32Buffer returns a buffer's data and dimensions when it is float32.
func float32Buffer(backend *simplego.Backend, buf *simplego.Buffer) (flat []float32, dims []int, ok bool) {
	shape, err := backend.BufferShape(buf)
	if err != nil || shape.DType != dtypes.Float32 {
		return nil, nil, false
	}
	data, err := backend.BufferData(buf)
	if err != nil {
		return nil, nil, false
	}
	flat, ok = data.([]float32)
	return flat, shape.Dimensions, ok
}

// newFloat32Buffer returns a new buffer of dimensions dims and its data.
func newFloat32Buffer(backend *simplego.Backend, dims []int) (*simplego.Buffer, []float32, error) {
	out := backend.NewBuffer(shapes.Make(dtypes.Float32, dims...))
	data, err := backend.BufferData(out)
	if err != nil {
		return nil, nil, err
	}
	return out, data.([]float32), nil
}

// fastDotGeneral is simplego's DotGeneral executor computing float32
// products with matmulNT where canMatmulNT allows; it hands everything else
// (other dtypes, small products in other layouts) to simplego's own.
func fastDotGeneral(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
	p, ok := readSimpleGoDotParams(node)
	if !ok || isPlain(backend) {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	lhsFlat, lhsDims, ok1 := float32Buffer(backend, inputs[0])
	rhsFlat, rhsDims, ok2 := float32Buffer(backend, inputs[1])
	if !ok1 || !ok2 {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	A := newOperandView(lhsFlat, lhsDims, p.lhsContracting, p.lhsBatch)
	B := newOperandView(rhsFlat, rhsDims, p.rhsContracting, p.rhsBatch)
	if !canMatmulNT(A, B, p.lhsCross, p.rhsCross) {
		return simplegoExecDotGeneral(backend, node, inputs, inputsOwned)
	}
	out, outFlat, err := newFloat32Buffer(backend, []int{p.batch, p.lhsCross, p.rhsCross})
	if err != nil {
		return nil, fmt.Errorf("fast DotGeneral: %w", err)
	}
	fastMatmulCalls.Add(1)
	matmulNT(A, B, p.batch, p.lhsCross, p.rhsCross, p.contracting, outFlat)
	return out, nil
}

// fastBinary returns the executor of a float32 arithmetic op with
// broadcasting (binaryBroadcast); orig is simplego's. Like simplego's, it
// writes into an input it owns that has the output's shape.
func fastBinary(op binaryOp, orig simplegoExecutor) simplegoExecutor {
	return func(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
		outDims, ok := nodeOutputDims(node)
		if !ok || isPlain(backend) {
			return orig(backend, node, inputs, inputsOwned)
		}
		a, aDims, ok1 := float32Buffer(backend, inputs[0])
		b, bDims, ok2 := float32Buffer(backend, inputs[1])
		if !ok1 || !ok2 {
			return orig(backend, node, inputs, inputsOwned)
		}
		reuse := -1
		switch {
		case inputsOwned[1] && slices.Equal(bDims, outDims):
			reuse = 1
		case inputsOwned[0] && slices.Equal(aDims, outDims):
			reuse = 0
		}
		var out *simplego.Buffer
		var outFlat []float32
		if reuse >= 0 {
			out, outFlat = inputs[reuse], [][]float32{a, b}[reuse]
		} else {
			var err error
			if out, outFlat, err = newFloat32Buffer(backend, outDims); err != nil {
				return nil, fmt.Errorf("fast %v: %w", op, err)
			}
		}
		if !binaryBroadcast(op, outFlat, a, b, outDims, aDims, bDims) { // nothing written
			if reuse < 0 {
				_ = backend.BufferFinalize(out)
			}
			return orig(backend, node, inputs, inputsOwned)
		}
		if reuse >= 0 {
			inputs[reuse] = nil // tells simplego the buffer became the output
		}
		fastOpCalls.Add(1)
		return out, nil
	}
}

// fastUnary returns the executor of a float32 unary op computed by fn
// (expFloat32, logisticFloat32); orig is simplego's. Like simplego's, it
// computes in place into an input it owns.
func fastUnary(fn func(dst, x []float32), orig simplegoExecutor) simplegoExecutor {
	return func(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
		x, dims, ok := float32Buffer(backend, inputs[0])
		if !ok || isPlain(backend) {
			return orig(backend, node, inputs, inputsOwned)
		}
		out, outFlat := inputs[0], x
		if inputsOwned[0] {
			inputs[0] = nil // computed in place
		} else {
			var err error
			if out, outFlat, err = newFloat32Buffer(backend, dims); err != nil {
				return nil, fmt.Errorf("fast unary op: %w", err)
			}
		}
		unaryParallel(fn, outFlat, x)
		fastOpCalls.Add(1)
		return out, nil
	}
}

// fastReduce returns the executor of ReduceSum or ReduceMax for float32
// over a block of consecutive axes (reduceAxes).
func fastReduce(kind reduceKind) simplegoExecutor {
	return func(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
		outDims, ok1 := nodeOutputDims(node)
		axes, ok2 := nodeIntsData(node)
		x, dims, ok3 := float32Buffer(backend, inputs[0])
		if !ok1 || !ok2 || !ok3 || len(axes) == 0 || isPlain(backend) {
			return simplegoExecReduce(backend, node, inputs, inputsOwned)
		}
		out, outFlat, err := newFloat32Buffer(backend, outDims)
		if err != nil {
			return nil, fmt.Errorf("fast reduce: %w", err)
		}
		if !reduceAxes(kind, outFlat, x, dims, axes) {
			_ = backend.BufferFinalize(out)
			return simplegoExecReduce(backend, node, inputs, inputsOwned)
		}
		fastOpCalls.Add(1)
		return out, nil
	}
}

// fastBroadcastInDim is the executor of BroadcastInDim for float32.
func fastBroadcastInDim(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
	outDims, ok1 := nodeOutputDims(node)
	axes, ok2 := nodeIntsData(node)
	x, dims, ok3 := float32Buffer(backend, inputs[0])
	if !ok1 || !ok2 || !ok3 || isPlain(backend) {
		return simplegoExecBroadcastInDim(backend, node, inputs, inputsOwned)
	}
	out, outFlat, err := newFloat32Buffer(backend, outDims)
	if err != nil {
		return nil, fmt.Errorf("fast BroadcastInDim: %w", err)
	}
	if !broadcastInDim(outFlat, x, outDims, dims, axes) {
		_ = backend.BufferFinalize(out)
		return simplegoExecBroadcastInDim(backend, node, inputs, inputsOwned)
	}
	fastOpCalls.Add(1)
	return out, nil
}

// fastSlice is the executor of Slice for float32 operands with unit strides: the slice
// copied as contiguous runs (copySlice) instead of element by element.
func fastSlice(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error) {
	outDims, ok1 := nodeOutputDims(node)
	starts, limits, strides, ok2 := sliceParams(node)
	x, dims, ok3 := float32Buffer(backend, inputs[0])
	if !ok1 || !ok2 || !ok3 || isPlain(backend) || len(starts) != len(dims) || len(limits) != len(dims) {
		return simplegoExecSlice(backend, node, inputs, inputsOwned)
	}
	for _, st := range strides {
		if st != 1 {
			return simplegoExecSlice(backend, node, inputs, inputsOwned)
		}
	}
	out, outFlat, err := newFloat32Buffer(backend, outDims)
	if err != nil {
		return nil, fmt.Errorf("fast Slice: %w", err)
	}
	if !copySlice(outFlat, x, dims, starts, limits) {
		_ = backend.BufferFinalize(out)
		return simplegoExecSlice(backend, node, inputs, inputsOwned)
	}
	fastOpCalls.Add(1)
	return out, nil
}
