package simplegofast

// A faster matrix product for simplego, whose scalar Go loop (~4.5 GFLOP/s
// per core) was 75–80% of a training step: a BLIS-style blocked product
// with a 6×32 register-blocked micro-kernel, operands copied into panels
// when the kernel cannot read them where they lie. On amd64 the kernel is
// assembly (kernels_amd64.s): AVX-512 (~130 GFLOP/s per core) or two
// AVX2/FMA 6×16 halves (~60–70); executors.go installs the product as
// simplego's DotGeneral. The portable kernel6x32Go serves the tests.
//
// The product is exact float32 arithmetic in another order of summation
// (and with fused multiply-adds): results differ from simplego's in the last
// bits, as any two BLAS libraries do.

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// Blocking of the packed product: micro-tile mr × nr (the registers of the
// micro-kernel), kc contracting steps per micro-kernel call (a 32 × kc panel
// of the right operand stays in L1), mc × nc output tiles per task (an
// mc × kc block of the left operand stays in L2).
const (
	gemmMR = 6
	gemmNR = 32
	gemmKC = 256
	gemmMC = 96
	gemmNC = 256
)

// gemmDirectStride is the longest stride (in values) at which gemmNT reads
// the left operand where it lies instead of copying it into panels.
const gemmDirectStride = 1024

// fastMatmulMinCross is the smallest lhs and rhs cross size (rows of the
// output, columns of the output) for which the packed product is used:
// below it, packing the operands costs more than it saves (decode-shaped
// products with a few rows go to simplego's own, unpacked loop).
const fastMatmulMinCross = 16

// dotParams are the axes and sizes of a simplego DotGeneral node.
type dotParams struct {
	lhsContracting, lhsBatch, rhsContracting, rhsBatch []int
	batch, lhsCross, rhsCross, contracting             int
}

// operandView addresses element (b, i, p) — batch index, cross index,
// contracting index, each flattened row-major over its axes — of one operand
// of a DotGeneral in the operand's own row-major data:
// flat[bOff[b] + iOff[i] + pOff[p]]. No data is moved to build it.
type operandView struct {
	flat             []float32
	bOff, iOff, pOff []int
	iStride, pStride int // uniformStride of iOff and pOff
}

// newOperandView describes an operand of dimensions dims whose contracting
// and batch axes are given in DotGeneral's order; the other axes are its
// cross axes, in increasing order.
func newOperandView(flat []float32, dims, contracting, batch []int) operandView {
	strides := make([]int, len(dims))
	s := 1
	for a := len(dims) - 1; a >= 0; a-- {
		strides[a] = s
		s *= dims[a]
	}
	var cross []int
	for a := range dims {
		if !containsInt(contracting, a) && !containsInt(batch, a) {
			cross = append(cross, a)
		}
	}
	v := operandView{
		flat: flat,
		bOff: axisOffsets(dims, strides, batch),
		iOff: axisOffsets(dims, strides, cross),
		pOff: axisOffsets(dims, strides, contracting),
	}
	v.iStride, v.pStride = uniformStride(v.iOff), uniformStride(v.pOff)
	return v
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// axisOffsets lists the flat offsets of every index combination of axes
// (row-major over axes: the last one varies fastest).
func axisOffsets(dims, strides, axes []int) []int {
	offs := []int{0}
	for _, a := range axes {
		next := make([]int, 0, len(offs)*dims[a])
		for _, o := range offs {
			for i := 0; i < dims[a]; i++ {
				next = append(next, o+i*strides[a])
			}
		}
		offs = next
	}
	return offs
}

// uniformStride returns s when offs[i] = offs[0] + i·s for every i (s = 1
// for a single offset), else 0.
func uniformStride(offs []int) int {
	if len(offs) < 2 {
		return 1
	}
	s := offs[1] - offs[0]
	for i := 2; i < len(offs); i++ {
		if offs[i]-offs[i-1] != s {
			return 0
		}
	}
	return s
}

// packPanels copies cross indices [0, n) of batch b of operand o,
// contracting indices [p0, p0+k), into panels of g rows: panel q holds rows
// q·g … q·g+g-1 as dst[(q-q0)·k·g + p·g + r] = o(b, q·g+r, p0+p), zero for
// rows past n. Panels q0 … q1-1 are written.
func packPanels(o operandView, b, n, p0, k, g, q0, q1 int, dst []float32) {
	base := o.bOff[b]
	if o.iStride == 1 && o.pStride != 1 {
		// Cross axis contiguous (a weight contracted on its rows, or an
		// activation's gradient contracted on its tokens): walk p outside,
		// so that each of the k source rows is read once, contiguously,
		// across the panels.
		lo, hi := q0*g, min(q1*g, n)
		if q1*g > n {
			clear(dst[(q1-1-q0)*k*g : (q1-q0)*k*g]) // the last panel's missing rows
		}
		for p := 0; p < k; p++ {
			src := o.flat[base+o.pOff[p0+p]+o.iOff[lo]:][:hi-lo]
			for q := q0; q < q1; q++ {
				panel := dst[(q-q0)*k*g+p*g:][:g]
				run := src[(q-q0)*g : min((q-q0+1)*g, len(src))]
				switch { // whole runs as array copies (a few vector moves)
				case len(run) == gemmMR && g == gemmMR:
					*(*[gemmMR]float32)(panel) = [gemmMR]float32(run)
				case len(run) == gemmNR && g == gemmNR:
					*(*[gemmNR]float32)(panel) = [gemmNR]float32(run)
				default:
					copy(panel, run)
				}
			}
		}
		return
	}
	for q := q0; q < q1; q++ {
		panel := dst[(q-q0)*k*g : (q-q0+1)*k*g]
		i0 := q * g
		rows := min(g, n-i0)
		if rows < g {
			clear(panel)
		}
		if o.pStride == 1 { // contracting axis contiguous: read rows, write strided
			for r := 0; r < rows; r++ {
				src := o.flat[base+o.iOff[i0+r]+p0:][:k]
				for p, x := range src {
					panel[p*g+r] = x
				}
			}
			continue
		}
		for r := 0; r < rows; r++ {
			row := base + o.iOff[i0+r]
			for p := 0; p < k; p++ {
				panel[p*g+r] = o.flat[row+o.pOff[p0+p]]
			}
		}
	}
}

// canMatmulNT reports whether matmulNT computes a product of M = lhsCross
// rows and N = rhsCross columns of operands A and B.
func canMatmulNT(A, B operandView, M, N int) bool {
	return (M >= fastMatmulMinCross && N >= fastMatmulMinCross) || (A.pStride == 1 && B.pStride == 1) || B.iStride == 1
}

// matmulNT computes out[b, i, j] = Σₚ A(b, i, p)·B(b, j, p) (row-major
// [batch, M, N], overwritten) where canMatmulNT allows: with the packed
// product when the output has at least fastMatmulMinCross rows and columns,
// else (a few rows or columns, as in decoding) with dot products of
// contiguous rows, or with scaled rows of B added up when B's cross axis is
// contiguous (attention probabilities times the value cache).
func matmulNT(A, B operandView, batch, M, N, K int, out []float32) {
	switch {
	case M >= fastMatmulMinCross && N >= fastMatmulMinCross:
		gemmNT(A, B, batch, M, N, K, out)
	case A.pStride == 1 && B.pStride == 1:
		dotsNT(A, B, batch, M, N, K, out)
	default:
		axpyNT(A, B, batch, M, N, K, out)
	}
}

// axpyNT computes what gemmNT does for operands where B's cross axis is
// contiguous (iStride 1), without packing: row i of the output is
// Σₚ A(b, i, p)·B(b, ·, p), one scaled row of B added per p.
func axpyNT(A, B operandView, batch, M, N, K int, out []float32) {
	parallelForWork(batch, batch*M*N*K, func(b int) {
		outB := out[b*M*N : (b+1)*M*N]
		clear(outB)
		aBase, bBase := A.bOff[b], B.bOff[b]
		for p := 0; p < K; p++ {
			row := B.flat[bBase+B.pOff[p]+B.iOff[0]:][:N]
			for i := 0; i < M; i++ {
				axpy(outB[i*N:(i+1)*N], row, A.flat[aBase+A.iOff[i]+A.pOff[p]])
			}
		}
	})
}

// axpyGo is the portable axpy: dst[j] += a·x[j].
func axpyGo(dst, x []float32, a float32) {
	x = x[:len(dst)]
	for j, v := range x {
		dst[j] += a * v
	}
}

// gemmNT computes out[b, i, j] = Σₚ A(b, i, p)·B(b, j, p) for b < batch,
// i < M, j < N, p < K, into out (row-major [batch, M, N], overwritten), on
// up to GOMAXPROCS goroutines. B is copied once into panels of 16 rows; A
// is read in place when its stride is short (≤ gemmDirectStride), else
// copied per task into panels of 6 rows (long strides thrash the cache);
// edge rows go through a zero-padded panel.
func gemmNT(A, B operandView, batch, M, N, K int, out []float32) {
	aDirect := (A.pStride == 1 && A.iStride > 0 && A.iStride <= gemmDirectStride) ||
		(A.iStride == 1 && A.pStride > 0 && A.pStride <= gemmDirectStride)
	nPanels := ceilDiv(N, gemmNR)
	bSize := nPanels * gemmNR * K // per batch element
	pb := getScratch(batch * bSize)
	defer putScratch(pb)

	// Pack B, a chunk of panels per task.
	const panelsPerTask = 8
	chunks := ceilDiv(nPanels, panelsPerTask)
	parallelFor(batch*chunks, func(t int) {
		b, q0 := t/chunks, (t%chunks)*panelsPerTask
		q1 := min(q0+panelsPerTask, nPanels)
		packPanels(B, b, N, 0, K, gemmNR, q0, q1, pb[b*bSize+q0*K*gemmNR:(b+1)*bSize])
	})

	// Multiply, one mc × nc output tile per task.
	mTiles, nTiles := ceilDiv(M, gemmMC), ceilDiv(N, gemmNC)
	parallelFor(batch*mTiles*nTiles, func(t int) {
		b, it, jt := t/(mTiles*nTiles), (t/nTiles)%mTiles, t%nTiles
		i0, j0 := it*gemmMC, jt*gemmNC
		i1, j1 := min(i0+gemmMC, M), min(j0+gemmNC, N)
		outB := out[b*M*N : (b+1)*M*N]
		pa := getScratch(gemmMC * gemmKC) // this tile's block of A, packed (or only its partial last group)
		defer putScratch(pa)
		var tmp [gemmMR * gemmNR]float32 // edge tiles of the output
		for p0 := 0; p0 < K; p0 += gemmKC {
			k, add := min(gemmKC, K-p0), p0 > 0
			switch {
			case !aDirect:
				packPanels(A, b, M, p0, k, gemmMR, i0/gemmMR, ceilDiv(i1, gemmMR), pa)
			case i1 == M && M%gemmMR != 0:
				last := M / gemmMR
				packPanels(A, b, M, p0, k, gemmMR, last, last+1, pa)
			}
			for j := j0; j < j1; j += gemmNR {
				bp := pb[b*bSize+(j/gemmNR)*gemmNR*K+p0*gemmNR:]
				for i := i0; i < i1; i += gemmMR {
					var ap []float32
					ars, aps := 1, gemmMR
					switch {
					case !aDirect:
						ap = pa[((i-i0)/gemmMR)*gemmMR*k:]
					case i+gemmMR > M:
						ap = pa
					case A.pStride == 1:
						ap, ars, aps = A.flat[A.bOff[b]+A.iOff[i]+p0:], A.iStride, 1
					default: // A.iStride == 1
						ap, aps = A.flat[A.bOff[b]+A.iOff[i]+A.pOff[p0]:], A.pStride
					}
					if i+gemmMR <= M && j+gemmNR <= N {
						kernel6x32(k, ap, ars, aps, bp, gemmNR, outB[i*N+j:], N, add)
						continue
					}
					kernel6x32(k, ap, ars, aps, bp, gemmNR, tmp[:], gemmNR, false)
					for r := 0; r < min(gemmMR, M-i); r++ {
						dst := outB[(i+r)*N+j:][:min(gemmNR, N-j)]
						for c := range dst {
							if add {
								dst[c] += tmp[r*gemmNR+c]
							} else {
								dst[c] = tmp[r*gemmNR+c]
							}
						}
					}
				}
			}
		}
	})
}

// dotsNT computes what gemmNT does for operands whose contracting index is
// contiguous (pStride 1) without packing them: each output element is the
// dot product of a row of A and a row of B, two rows of A against four of B
// at a time. It
// reads B once, which is what products with a few rows (decoding: M = the
// batch, B = a weight or the KV cache) want.
func dotsNT(A, B operandView, batch, M, N, K int, out []float32) {
	rowsPerTask := dotsRowsPerTask(batch, N)
	chunks := ceilDiv(N, rowsPerTask)
	parallelForWork(batch*chunks, batch*M*N*K, func(t int) {
		b, j0 := t/chunks, (t%chunks)*rowsPerTask
		j1 := min(j0+rowsPerTask, N)
		aBase, bBase := A.bOff[b], B.bOff[b]
		outB := out[b*M*N : (b+1)*M*N]
		row := func(o operandView, base, i int) []float32 { return o.flat[base+o.iOff[i]:][:K] }
		var d [4]float32
		var d2 [8]float32
		j := j0
		for ; j+4 <= j1; j += 4 {
			b0, b1, b2, b3 := row(B, bBase, j), row(B, bBase, j+1), row(B, bBase, j+2), row(B, bBase, j+3)
			i := 0
			for ; i+2 <= M; i += 2 { // two rows of A at a time: eight independent sums
				dot2x4(row(A, aBase, i), row(A, aBase, i+1), b0, b1, b2, b3, &d2)
				copy(outB[i*N+j:i*N+j+4], d2[:4])
				copy(outB[(i+1)*N+j:(i+1)*N+j+4], d2[4:])
			}
			if i < M {
				dot4(row(A, aBase, i), b0, b1, b2, b3, &d)
				copy(outB[i*N+j:i*N+j+4], d[:])
			}
		}
		for ; j < j1; j++ { // the last rows of B, one at a time
			bj := row(B, bBase, j)
			for i := 0; i < M; i++ {
				dot4(row(A, aBase, i), bj, bj, bj, bj, &d)
				outB[i*N+j] = d[0]
			}
		}
	})
}

// dotsRowsPerTask is how many rows of B (a multiple of 4, at most 256) each
// task of dotsNT takes: few enough that every core gets work (a decoding
// step's products have one batch element and 128–768 rows: one task of 256
// rows would leave the other cores idle), at least 16 so that a task
// outweighs its scheduling.
func dotsRowsPerTask(batch, N int) int {
	tasks := 4 * runtime.GOMAXPROCS(0) // tasks wanted, a few per core to even out their ends
	perBatch := ceilDiv(tasks, batch)
	rows := ceilDiv(ceilDiv(N, perBatch), 4) * 4
	return min(max(rows, 16), 256)
}

// dot2x4Go is the portable dot2x4: out[4i + r] = Σₚ a_i[p]·b_r[p] for
// i < 2, r < 4, p < len(a0).
func dot2x4Go(a0, a1, b0, b1, b2, b3 []float32, out *[8]float32) {
	var d [4]float32
	dot4Go(a0, b0, b1, b2, b3, &d)
	copy(out[:4], d[:])
	dot4Go(a1, b0, b1, b2, b3, &d)
	copy(out[4:], d[:])
}

// dot4Go is the portable dot4: out[r] = Σₚ a[p]·b_r[p], p < len(a).
func dot4Go(a, b0, b1, b2, b3 []float32, out *[4]float32) {
	var s0, s1, s2, s3 float32
	for p, x := range a {
		s0 += x * b0[p]
		s1 += x * b1[p]
		s2 += x * b2[p]
		s3 += x * b3[p]
	}
	*out = [4]float32{s0, s1, s2, s3}
}

// kernel6x32Go is the micro-kernel of the packed product in portable Go:
// kernel6x16Go on columns 0–15 and 16–31.
func kernel6x32Go(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	kernel6x16Go(k, a, ars, aps, b, bps, c, ldc, add)
	kernel6x16Go(k, a, ars, aps, b[16:], bps, c[16:], ldc, add)
}

// kernel6x16Go is a 6×16 micro-kernel in portable Go: for r < 6, j < 16,
// c[r·ldc + j] (+)= Σₚ a[r·ars + p·aps]·b[p·bps + j], p < k (add false
// overwrites c). A packed panel of a is ars = 1, aps = 6; rows of a with a
// contiguous contracting axis are ars = row stride, aps = 1; b's 16 values
// of one p are contiguous. It defines what the assembly kernel computes.
func kernel6x16Go(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, add bool) {
	var acc [gemmMR][16]float32
	for p := 0; p < k; p++ {
		bp := b[p*bps:][:16]
		for r := range acc {
			x := a[r*ars+p*aps]
			for j, y := range bp {
				acc[r][j] += x * y
			}
		}
	}
	for r := range acc {
		row := c[r*ldc:][:16]
		for j, x := range acc[r] {
			if add {
				row[j] += x
			} else {
				row[j] = x
			}
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// minParallelWork is the multiply-adds below which a product runs on the
// calling goroutine alone (a few microseconds of work: a decoding step's
// small products, where starting and waiting for helpers costs more than it
// saves, and much more on a busy machine).
const minParallelWork = 1 << 18

// parallelForWork is parallelFor for tasks that do work multiply-adds in
// all: on the calling goroutine alone below minParallelWork.
func parallelForWork(n, work int, fn func(i int)) {
	if work < minParallelWork {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	parallelFor(n, fn)
}

// parallelFor runs fn(0) … fn(n-1) on up to GOMAXPROCS goroutines: the
// caller's and helpers that take the next index as they get to it. The
// caller works too, so on a busy machine, where a helper may start late, it
// does not wait for one that has not started: a helper that finds every
// index taken just ends.
func parallelFor(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			fn(i)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// scratchPools recycle the packing buffers, by power-of-two capacity.
var scratchPools [64]sync.Pool

// getScratch returns a float32 slice of length n (contents undefined).
func getScratch(n int) []float32 {
	c := bits.Len(uint(max(n, 1) - 1))
	if v, ok := scratchPools[c].Get().(*[]float32); ok {
		return (*v)[:n]
	}
	return make([]float32, n, 1<<c)
}

// putScratch hands a slice from getScratch back for reuse.
func putScratch(s []float32) {
	c := bits.Len(uint(cap(s) - 1))
	if cap(s) == 1<<c {
		scratchPools[c].Put(&s)
	}
}
