//go:build !nofastkernels

package simplegofast

// Installing matmul.go's product and elementwise.go's ops as executors of
// GoMLX's pure-Go backend (simplego), on amd64 CPUs with AVX2 and FMA
// (Install, install.go). What the executors reach of simplego's internals
// (its executor table, its own executors, the fields of its nodes) is in
// gomlx.go; anything unexpected there (another layout, another dtype, a
// shape they do not handle) goes to simplego's own executor. Backends
// marked with KeepPlain always use simplego's own. Built with
// -tags nofastkernels, none of this is compiled (plain.go).

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// fastKernelsBuilt: the executors are compiled in (not -tags nofastkernels).
const fastKernelsBuilt = true

// fastMatmulCalls counts the products fastDotGeneral computed itself, and
// fastOpCalls the elementwise ops computed here (tests).
var fastMatmulCalls, fastOpCalls atomic.Int64

// install makes this file's executors simplego's when the CPU has AVX2 and
// FMA and simplego's internals are the ones gomlx.go reads (checkGoMLX).
func install() error {
	if !haveFastKernel() {
		return fmt.Errorf("%w: the CPU lacks AVX2 or FMA (or is not amd64)", ErrUnsupported)
	}
	if err := checkGoMLX(); err != nil {
		return err
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
