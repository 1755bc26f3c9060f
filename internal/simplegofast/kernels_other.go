//go:build !amd64

package simplegofast

// kernel6x16 and kernel6x32 are the portable micro-kernels: the packed
// product and the elementwise ops are not installed on this architecture
// (Install refuses: simplego keeps its own executors), only tested.
func kernel6x16(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	kernel6x16Go(k, a, ars, aps, b, bps, c, ldc, add)
}

func kernel6x32(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	kernel6x32Go(k, a, ars, aps, b, bps, c, ldc, add)
}

func kernel6x32On(_ bool, k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	kernel6x32Go(k, a, ars, aps, b, bps, c, ldc, add)
}

// dot2x4 is the portable dot2x4Go.
func dot2x4(a0, a1, b0, b1, b2, b3 []float32, out *[8]float32) { dot2x4Go(a0, a1, b0, b1, b2, b3, out) }

// axpy is the portable axpyGo.
func axpy(dst, x []float32, a float32) { axpyGo(dst, x, a) }

// dot4 is the portable dot4Go.
func dot4(a, b0, b1, b2, b3 []float32, out *[4]float32) { dot4Go(a, b0, b1, b2, b3, out) }

func haveFastKernel() bool { return false }

// expFloat32 is the portable exponential.
func expFloat32(dst, x []float32) { expFloat32Go(dst, x) }

// The elementwise loops, portable.
func binaryVecRun(op binaryOp, dst, a, b []float32) { binaryVecRunGo(op, dst, a, b) }
func binaryScalarRun(op binaryOp, dst, x []float32, c float32, scalarLeft bool) {
	binaryScalarRunGo(op, dst, x, c, scalarLeft)
}
func sumRun(x []float32) float32 { return sumRunGo(x) }
func maxRun(x []float32) float32 { return maxRunGo(x) }
