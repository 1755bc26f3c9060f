package simplegofast

// The assembly kernels' Go wrappers on amd64 CPUs with AVX2 and FMA (and
// AVX-512 for kernel6x32): each checks that its slices hold what the
// kernel reads and writes, and falls back to the portable Go loop on a CPU
// without the instructions.

import "golang.org/x/sys/cpu"

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
