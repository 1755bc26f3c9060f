package simplegofast

import "math"

// The elementwise loops of elementwise.go in AVX2 (elementwise_amd64.s) when
// the CPU has it: the assembly does whole blocks of 8 values, Go the rest.

//go:noescape
func addVecAVX2(dst, a, b *float32, n int)

//go:noescape
func subVecAVX2(dst, a, b *float32, n int)

//go:noescape
func mulVecAVX2(dst, a, b *float32, n int)

//go:noescape
func divVecAVX2(dst, a, b *float32, n int)

//go:noescape
func addScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func mulScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func subScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func rsubScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func divScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func rdivScalarAVX2(dst, x *float32, c float32, n int)

//go:noescape
func sum8AVX2(x *float32, n int, out *[8]float32)

//go:noescape
func max8AVX2(x *float32, n int, out *[8]float32) (nan bool)

// binaryVecRun is dst[i] = a[i] op b[i] (dst may be a or b).
func binaryVecRun(op binaryOp, dst, a, b []float32) {
	n8 := len(dst) &^ 7
	if !haveAVX2FMA || n8 == 0 {
		binaryVecRunGo(op, dst, a, b)
		return
	}
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case opAdd:
		addVecAVX2(&dst[0], &a[0], &b[0], n8)
	case opSub:
		subVecAVX2(&dst[0], &a[0], &b[0], n8)
	case opMul:
		mulVecAVX2(&dst[0], &a[0], &b[0], n8)
	case opDiv:
		divVecAVX2(&dst[0], &a[0], &b[0], n8)
	}
	binaryVecRunGo(op, dst[n8:], a[n8:], b[n8:])
}

// binaryScalarRun is dst[i] = x[i] op c, or c op x[i] when scalarLeft (dst may be x).
func binaryScalarRun(op binaryOp, dst, x []float32, c float32, scalarLeft bool) {
	n8 := len(dst) &^ 7
	if !haveAVX2FMA || n8 == 0 {
		binaryScalarRunGo(op, dst, x, c, scalarLeft)
		return
	}
	x = x[:len(dst)]
	switch {
	case op == opAdd:
		addScalarAVX2(&dst[0], &x[0], c, n8)
	case op == opMul:
		mulScalarAVX2(&dst[0], &x[0], c, n8)
	case op == opSub && !scalarLeft:
		subScalarAVX2(&dst[0], &x[0], c, n8)
	case op == opSub:
		rsubScalarAVX2(&dst[0], &x[0], c, n8)
	case op == opDiv && !scalarLeft:
		divScalarAVX2(&dst[0], &x[0], c, n8)
	case op == opDiv:
		rdivScalarAVX2(&dst[0], &x[0], c, n8)
	}
	binaryScalarRunGo(op, dst[n8:], x[n8:], c, scalarLeft)
}

// sumRun is Σ x[i]: eight lanes of partial sums (four registers of them in
// the assembly), then the last n mod 8 values.
func sumRun(x []float32) float32 {
	n8 := len(x) &^ 7
	if !haveAVX2FMA || n8 == 0 {
		return sumRunGo(x)
	}
	var o [8]float32
	sum8AVX2(&x[0], n8, &o)
	return ((o[0] + o[1]) + (o[2] + o[3])) + ((o[4] + o[5]) + (o[6] + o[7])) + sumRunGo(x[n8:])
}

// maxRun is max x[i]: NaN if any is NaN, -Inf for none.
func maxRun(x []float32) float32 {
	n8 := len(x) &^ 7
	if !haveAVX2FMA || n8 == 0 {
		return maxRunGo(x)
	}
	var o [8]float32
	if max8AVX2(&x[0], n8, &o) {
		return float32(math.NaN())
	}
	return max(maxRunGo(o[:]), maxRunGo(x[n8:]))
}
