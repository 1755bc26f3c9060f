package simplegofast

// Faster float32 elementwise ops for simplego, whose per-element
// multi-axis iterator and float64 math.Exp took most of a step once the
// product was fast: broadcasting resolved into strided runs (a tight inner
// loop, an odometer over the rest), reductions over a block of consecutive
// axes, and an AVX2 exponential and logistic. The inner loops run eight
// values at a time in assembly on amd64 (elementwise_amd64.s; the *Go
// versions elsewhere). executors.go installs them next to the product.

import (
	"math"
)

// binaryOp is one of the arithmetic ops with broadcasting.
type binaryOp int

const (
	opAdd binaryOp = iota
	opSub
	opMul
	opDiv
)

// elementwiseParallelMin is the output size from which the ops split their
// work across goroutines.
const elementwiseParallelMin = 1 << 16

// stridedLoop walks an output of some dimensions with up to two operands
// given by their strides along the output's axes (0 where an operand is
// broadcast), with the axes merged as far as the strides allow: outer axes
// walked by an odometer, one inner run of length inner where each operand
// steps by 0 or 1.
type stridedLoop struct {
	outerDims           []int
	aOuter, bOuter      []int // strides of a and b along the outer axes
	inner, aStep, bStep int
	outerSize           int
}

// newStridedLoop builds the loop for output dimensions dims and operand
// strides aStrides, bStrides (same rank as dims). ok is false when the
// innermost run steps by something other than 0 or 1 (not a broadcast).
func newStridedLoop(dims, aStrides, bStrides []int) (l stridedLoop, ok bool) {
	// Drop axes of length 1, then merge an axis into the next when both
	// operands are contiguous across them.
	var d, as, bs []int
	for i, n := range dims {
		if n == 1 {
			continue
		}
		k := len(d) - 1
		if k >= 0 && as[k] == aStrides[i]*n && bs[k] == bStrides[i]*n {
			d[k] *= n
			as[k], bs[k] = aStrides[i], bStrides[i]
			continue
		}
		d, as, bs = append(d, n), append(as, aStrides[i]), append(bs, bStrides[i])
	}
	if len(d) == 0 {
		d, as, bs = []int{1}, []int{1}, []int{1}
	}
	k := len(d) - 1
	l = stridedLoop{outerDims: d[:k], aOuter: as[:k], bOuter: bs[:k], inner: d[k], aStep: as[k], bStep: bs[k]}
	l.outerSize = 1
	for _, n := range l.outerDims {
		l.outerSize *= n
	}
	return l, (l.aStep == 0 || l.aStep == 1) && (l.bStep == 0 || l.bStep == 1)
}

// run calls fn(o, aOff, bOff) for outer indices o in [o0, o1): the output run
// starts at o·inner, the operands' at aOff and bOff.
func (l *stridedLoop) run(o0, o1 int, fn func(o, aOff, bOff int)) {
	idx := make([]int, len(l.outerDims))
	aOff, bOff := 0, 0
	rem := o0
	for ax := len(l.outerDims) - 1; ax >= 0; ax-- {
		idx[ax] = rem % l.outerDims[ax]
		rem /= l.outerDims[ax]
		aOff += idx[ax] * l.aOuter[ax]
		bOff += idx[ax] * l.bOuter[ax]
	}
	for o := o0; o < o1; o++ {
		fn(o, aOff, bOff)
		for ax := len(l.outerDims) - 1; ax >= 0; ax-- {
			idx[ax]++
			aOff += l.aOuter[ax]
			bOff += l.bOuter[ax]
			if idx[ax] < l.outerDims[ax] {
				break
			}
			aOff -= idx[ax] * l.aOuter[ax]
			bOff -= idx[ax] * l.bOuter[ax]
			idx[ax] = 0
		}
	}
}

// parallelRuns splits the outer indices of l into chunks run on several
// goroutines when the output is large.
func (l *stridedLoop) parallelRuns(fn func(o, aOff, bOff int)) {
	total := l.outerSize * l.inner
	if total < elementwiseParallelMin || l.outerSize < 2 {
		l.run(0, l.outerSize, fn)
		return
	}
	chunks := min(l.outerSize, ceilDiv(total, elementwiseParallelMin/4))
	per := ceilDiv(l.outerSize, chunks)
	parallelFor(ceilDiv(l.outerSize, per), func(c int) {
		l.run(c*per, min((c+1)*per, l.outerSize), fn)
	})
}

// broadcastStrides returns the row-major strides of dims, with 0 for the
// axes where dims is 1 and out is not (broadcast).
func broadcastStrides(dims, out []int) []int {
	s := make([]int, len(dims))
	stride := 1
	for i := len(dims) - 1; i >= 0; i-- {
		if dims[i] != out[i] {
			s[i] = 0
		} else {
			s[i] = stride
		}
		stride *= dims[i]
	}
	return s
}

// binaryBroadcast computes out = a op b over the output dimensions outDims,
// a and b of dimensions aDims and bDims (the same rank as outDims, each axis
// equal to the output's or 1; an operand of size 1 may have any rank). out
// may be a or b when that one has the output's shape. ok is false (nothing
// written) for shapes it does not handle.
func binaryBroadcast(op binaryOp, out, a, b []float32, outDims, aDims, bDims []int) bool {
	if len(out) == 0 {
		return false // empty tensors: simplego's own
	}
	if len(a) == 1 && len(b) != 1 || len(b) == 1 && len(a) != 1 { // one scalar operand
		scalarLeft := len(a) == 1
		x, c := b, a[0]
		if !scalarLeft {
			x, c = a, b[0]
		}
		if len(x) != len(out) {
			return false
		}
		chunks := ceilDiv(len(out), elementwiseParallelMin)
		parallelFor(chunks, func(i int) {
			lo, hi := i*elementwiseParallelMin, min((i+1)*elementwiseParallelMin, len(out))
			binaryScalarRun(op, out[lo:hi], x[lo:hi], c, scalarLeft)
		})
		return true
	}
	if len(aDims) != len(outDims) || len(bDims) != len(outDims) {
		return false
	}
	for i, n := range outDims {
		if (aDims[i] != n && aDims[i] != 1) || (bDims[i] != n && bDims[i] != 1) {
			return false
		}
	}
	l, ok := newStridedLoop(outDims, broadcastStrides(aDims, outDims), broadcastStrides(bDims, outDims))
	if !ok || l.outerSize*l.inner != len(out) {
		return false
	}
	n := l.inner
	l.parallelRuns(func(o, aOff, bOff int) {
		dst := out[o*n : (o+1)*n]
		switch {
		case l.aStep == 1 && l.bStep == 1:
			binaryVecRun(op, dst, a[aOff:aOff+n], b[bOff:bOff+n])
		case l.aStep == 1:
			binaryScalarRun(op, dst, a[aOff:aOff+n], b[bOff], false)
		case l.bStep == 1:
			binaryScalarRun(op, dst, b[bOff:bOff+n], a[aOff], true)
		default:
			var c float32
			switch op {
			case opAdd:
				c = a[aOff] + b[bOff]
			case opSub:
				c = a[aOff] - b[bOff]
			case opMul:
				c = a[aOff] * b[bOff]
			case opDiv:
				c = a[aOff] / b[bOff]
			}
			for i := range dst {
				dst[i] = c
			}
		}
	})
	return true
}

// binaryVecRunGo is the portable binaryVecRun: dst[i] = a[i] op b[i].
func binaryVecRunGo(op binaryOp, dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case opAdd:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case opSub:
		for i := range dst {
			dst[i] = a[i] - b[i]
		}
	case opMul:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case opDiv:
		for i := range dst {
			dst[i] = a[i] / b[i]
		}
	}
}

// binaryScalarRunGo is the portable binaryScalarRun: dst[i] = x[i] op c, or
// c op x[i] when scalarLeft.
func binaryScalarRunGo(op binaryOp, dst, x []float32, c float32, scalarLeft bool) {
	x = x[:len(dst)]
	switch {
	case op == opAdd:
		for i := range dst {
			dst[i] = x[i] + c
		}
	case op == opMul:
		for i := range dst {
			dst[i] = x[i] * c
		}
	case op == opSub && !scalarLeft:
		for i := range dst {
			dst[i] = x[i] - c
		}
	case op == opSub:
		for i := range dst {
			dst[i] = c - x[i]
		}
	case op == opDiv && !scalarLeft:
		for i := range dst {
			dst[i] = x[i] / c
		}
	case op == opDiv:
		for i := range dst {
			dst[i] = c / x[i]
		}
	}
}

// broadcastInDim writes operand (dimensions opDims) into out (dimensions
// outDims): operand axis i becomes output axis axes[i], of the same length
// or broadcast from 1; the other output axes repeat it. ok is false for
// arguments it does not handle.
func broadcastInDim(out, operand []float32, outDims, opDims, axes []int) bool {
	if len(out) == 0 || len(operand) == 0 {
		return false // empty tensors: simplego's own
	}
	if len(axes) != len(opDims) {
		return false
	}
	full := make([]int, len(outDims)) // the operand's dimensions at the output's rank
	for i := range full {
		full[i] = 1
	}
	for i, ax := range axes {
		if ax < 0 || ax >= len(outDims) || (opDims[i] != outDims[ax] && opDims[i] != 1) {
			return false
		}
		full[ax] = opDims[i]
	}
	for i := 1; i < len(axes); i++ {
		if axes[i] <= axes[i-1] {
			return false
		}
	}
	if len(operand) == 1 {
		for i := range out {
			out[i] = operand[0]
		}
		return true
	}
	l, ok := newStridedLoop(outDims, broadcastStrides(full, outDims), make([]int, len(outDims)))
	if !ok || l.outerSize*l.inner != len(out) {
		return false
	}
	n := l.inner
	l.parallelRuns(func(o, aOff, _ int) {
		dst := out[o*n : (o+1)*n]
		if l.aStep == 1 {
			copy(dst, operand[aOff:aOff+n])
			return
		}
		c := operand[aOff]
		for i := range dst {
			dst[i] = c
		}
	})
	return true
}

// reduceKind is ReduceSum or ReduceMax.
type reduceKind int

const (
	reduceSum reduceKind = iota
	reduceMax
)

// reduceAxes reduces x (dimensions dims) over axes, which must be a block of
// consecutive axes (after dropping axes of length 1), into out: viewing x as
// [A, R, C] with R the reduced block, out[a, c] = reduce over r of
// x[a, r, c]. Sums use four partial sums per run. ok is false for axes it
// does not handle.
func reduceAxes(kind reduceKind, out, x []float32, dims, axes []int) bool {
	if len(x) == 0 || len(out) == 0 {
		return false // empty tensors: simplego's own
	}
	isReduced := make([]bool, len(dims))
	for _, ax := range axes {
		if ax < 0 || ax >= len(dims) {
			return false
		}
		isReduced[ax] = true
	}
	A, R, C := 1, 1, 1
	phase := 0 // 0: before the reduced block, 1: in it, 2: after it
	for i, n := range dims {
		switch {
		case n == 1:
		case isReduced[i] && phase <= 1:
			phase, R = 1, R*n
		case isReduced[i]:
			return false // a second reduced block
		case phase == 0:
			A *= n
		default:
			phase, C = 2, C*n
		}
	}
	if A*R*C != len(x) || A*C != len(out) {
		return false
	}
	chunks := min(A, ceilDiv(len(x), elementwiseParallelMin)) // over a, the rows of the output
	per := ceilDiv(A, max(chunks, 1))
	parallelFor(ceilDiv(A, per), func(chunk int) {
		a0, a1 := chunk*per, min((chunk+1)*per, A)
		for a := a0; a < a1; a++ {
			dst := out[a*C : (a+1)*C]
			src := x[a*R*C : (a+1)*R*C]
			if C == 1 {
				if kind == reduceSum {
					dst[0] = sumRun(src)
				} else {
					dst[0] = maxRun(src)
				}
				continue
			}
			copy(dst, src[:C])
			for r := 1; r < R; r++ {
				row := src[r*C : (r+1)*C]
				if kind == reduceSum {
					binaryVecRun(opAdd, dst, dst, row)
				} else {
					for c, v := range row {
						dst[c] = max(dst[c], v)
					}
				}
			}
		}
	})
	return true
}

// sumRunGo is the portable sumRun: Σ x[i], in four partial sums.
func sumRunGo(x []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// maxRunGo is the portable maxRun: max x[i] (NaN if any is NaN; -Inf for none).
func maxRunGo(x []float32) float32 {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3 := inf, inf, inf, inf
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0, m1, m2, m3 = max(m0, x[i]), max(m1, x[i+1]), max(m2, x[i+2]), max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(max(m0, m1), max(m2, m3))
}

// expFloat32Go is the portable exponential: math.Exp in float64.
func expFloat32Go(dst, x []float32) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = float32(math.Exp(float64(v)))
	}
}

// logisticFloat32 is dst[i] = 1 / (1 + exp(-x[i])) (dst may be x), with
// expFloat32: 1 above 87.3 (exp(-x) is 0 there), 0 below -88.7.
func logisticFloat32(dst, x []float32) {
	binaryScalarRun(opMul, dst, x[:len(dst)], -1, false)
	expFloat32(dst, dst)
	binaryScalarRun(opAdd, dst, dst, 1, false)
	binaryScalarRun(opDiv, dst, dst, 1, true)
}

// unaryParallel applies fn (one of the float32 unary ops above; dst may be
// x) in chunks on several goroutines for large inputs.
func unaryParallel(fn func(dst, x []float32), dst, x []float32) {
	chunks := ceilDiv(len(dst), elementwiseParallelMin)
	parallelFor(chunks, func(i int) {
		lo, hi := i*elementwiseParallelMin, min((i+1)*elementwiseParallelMin, len(dst))
		fn(dst[lo:hi], x[lo:hi])
	})
}

// copySlice copies the slice [starts, limits) (unit strides) of x, of dimensions dims in
// row-major order, into out: the trailing axes taken whole and the last one cut form
// contiguous runs, copied with copy() under an odometer over the leading axes. It reports
// false, writing nothing, when the bounds are not within dims.
func copySlice(out, x []float32, dims, starts, limits []int) bool {
	r := len(dims)
	for a := range r {
		if starts[a] < 0 || limits[a] > dims[a] || starts[a] > limits[a] {
			return false
		}
	}
	if r == 0 {
		copy(out, x)
		return true
	}
	// The run: the innermost axis and, outward, every axis taken whole, plus the first cut one.
	run := 1
	inner := r - 1
	for ; inner >= 0; inner-- {
		run *= limits[inner] - starts[inner]
		if starts[inner] != 0 || limits[inner] != dims[inner] {
			break
		}
	}
	if inner < 0 { // the whole operand
		copy(out, x[:len(out)])
		return true
	}
	// strides of x
	xs := make([]int, r)
	xs[r-1] = 1
	for a := r - 2; a >= 0; a-- {
		xs[a] = xs[a+1] * dims[a+1]
	}
	base := starts[inner] * xs[inner]
	idx := make([]int, inner) // odometer over the axes outside the run
	for o := 0; o < len(out); o += run {
		off := base
		for a := range inner {
			off += (starts[a] + idx[a]) * xs[a]
		}
		copy(out[o:o+run], x[off:off+run])
		for a := inner - 1; a >= 0; a-- {
			idx[a]++
			if idx[a] < limits[a]-starts[a] {
				break
			}
			idx[a] = 0
		}
	}
	return true
}
