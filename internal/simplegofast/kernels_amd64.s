#include "textflag.h"

// The micro-kernel of the matrix product (matmul.go), for CPUs with AVX2
// and FMA: kernel6x16Go in assembly. The 6×16 output tile lives in 12 YMM
// registers (Y4–Y15, two per row); each contracting step loads 16
// contiguous values of b (Y0, Y1), broadcasts one value of each of the 6
// rows of a (Y2, Y3) and does 12 fused multiply-adds. a's rows start at
// a + r·ars (SI, R9–R13) and step by aps per p (offset AX); b steps by bps.

// func kernel6x16AVX2(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, add bool)
// c[r*ldc + j] (+)= Σ_p a[r*ars + p*aps] · b[p*bps + j] for r < 6, j < 16, p < k.
TEXT ·kernel6x16AVX2(SB), NOSPLIT, $0-65
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	MOVQ aps+24(FP), R8
	SHLQ $2, R8
	MOVQ b+32(FP), DX
	MOVQ bps+40(FP), BX
	SHLQ $2, BX
	XORQ AX, AX
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	TESTQ CX, CX
	JEQ store

loop:
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VBROADCASTSS (SI)(AX*1), Y2
	VBROADCASTSS (R9)(AX*1), Y3
	VFMADD231PS Y0, Y2, Y4
	VFMADD231PS Y1, Y2, Y5
	VFMADD231PS Y0, Y3, Y6
	VFMADD231PS Y1, Y3, Y7
	VBROADCASTSS (R10)(AX*1), Y2
	VBROADCASTSS (R11)(AX*1), Y3
	VFMADD231PS Y0, Y2, Y8
	VFMADD231PS Y1, Y2, Y9
	VFMADD231PS Y0, Y3, Y10
	VFMADD231PS Y1, Y3, Y11
	VBROADCASTSS (R12)(AX*1), Y2
	VBROADCASTSS (R13)(AX*1), Y3
	VFMADD231PS Y0, Y2, Y12
	VFMADD231PS Y1, Y2, Y13
	VFMADD231PS Y0, Y3, Y14
	VFMADD231PS Y1, Y3, Y15
	ADDQ R8, AX
	ADDQ BX, DX
	DECQ CX
	JNE loop

store:
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), R8
	SHLQ $2, R8
	MOVBLZX add+64(FP), AX
	TESTQ AX, AX
	JEQ overwrite
	VADDPS (DI), Y4, Y4
	VADDPS 32(DI), Y5, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ R8, DI
	VADDPS (DI), Y6, Y6
	VADDPS 32(DI), Y7, Y7
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ R8, DI
	VADDPS (DI), Y8, Y8
	VADDPS 32(DI), Y9, Y9
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 32(DI)
	ADDQ R8, DI
	VADDPS (DI), Y10, Y10
	VADDPS 32(DI), Y11, Y11
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, 32(DI)
	ADDQ R8, DI
	VADDPS (DI), Y12, Y12
	VADDPS 32(DI), Y13, Y13
	VMOVUPS Y12, (DI)
	VMOVUPS Y13, 32(DI)
	ADDQ R8, DI
	VADDPS (DI), Y14, Y14
	VADDPS 32(DI), Y15, Y15
	VMOVUPS Y14, (DI)
	VMOVUPS Y15, 32(DI)
	VZEROUPPER
	RET

overwrite:
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ R8, DI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ R8, DI
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 32(DI)
	ADDQ R8, DI
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, 32(DI)
	ADDQ R8, DI
	VMOVUPS Y12, (DI)
	VMOVUPS Y13, 32(DI)
	ADDQ R8, DI
	VMOVUPS Y14, (DI)
	VMOVUPS Y15, 32(DI)
	VZEROUPPER
	RET

// The same micro-kernel for CPUs with AVX-512 (kernel6x32Go in assembly):
// the 6×32 output tile in 12 ZMM registers (Z4–Z15, two per row), 32
// contiguous values of b per contracting step (Z0, Z1), twice the work of
// an AVX2 step for the same instructions.

// func kernel6x32AVX512(k int, a *float32, ars, aps int, b *float32, bps int, c *float32, ldc int, add bool)
// c[r*ldc + j] (+)= Σ_p a[r*ars + p*aps] · b[p*bps + j] for r < 6, j < 32, p < k.
TEXT ·kernel6x32AVX512(SB), NOSPLIT, $0-65
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (R11)(R8*1), R12
	LEAQ (R12)(R8*1), R13
	MOVQ aps+24(FP), R8
	SHLQ $2, R8
	MOVQ b+32(FP), DX
	MOVQ bps+40(FP), BX
	SHLQ $2, BX
	XORQ AX, AX
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JEQ store512

loop512:
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1
	VBROADCASTSS (SI)(AX*1), Z2
	VBROADCASTSS (R9)(AX*1), Z3
	VFMADD231PS Z0, Z2, Z4
	VFMADD231PS Z1, Z2, Z5
	VFMADD231PS Z0, Z3, Z6
	VFMADD231PS Z1, Z3, Z7
	VBROADCASTSS (R10)(AX*1), Z2
	VBROADCASTSS (R11)(AX*1), Z3
	VFMADD231PS Z0, Z2, Z8
	VFMADD231PS Z1, Z2, Z9
	VFMADD231PS Z0, Z3, Z10
	VFMADD231PS Z1, Z3, Z11
	VBROADCASTSS (R12)(AX*1), Z2
	VBROADCASTSS (R13)(AX*1), Z3
	VFMADD231PS Z0, Z2, Z12
	VFMADD231PS Z1, Z2, Z13
	VFMADD231PS Z0, Z3, Z14
	VFMADD231PS Z1, Z3, Z15
	ADDQ R8, AX
	ADDQ BX, DX
	DECQ CX
	JNE loop512

store512:
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), R8
	SHLQ $2, R8
	MOVBLZX add+64(FP), AX
	TESTQ AX, AX
	JEQ overwrite512
	VADDPS (DI), Z4, Z4
	VADDPS 64(DI), Z5, Z5
	VMOVUPS Z4, (DI)
	VMOVUPS Z5, 64(DI)
	ADDQ R8, DI
	VADDPS (DI), Z6, Z6
	VADDPS 64(DI), Z7, Z7
	VMOVUPS Z6, (DI)
	VMOVUPS Z7, 64(DI)
	ADDQ R8, DI
	VADDPS (DI), Z8, Z8
	VADDPS 64(DI), Z9, Z9
	VMOVUPS Z8, (DI)
	VMOVUPS Z9, 64(DI)
	ADDQ R8, DI
	VADDPS (DI), Z10, Z10
	VADDPS 64(DI), Z11, Z11
	VMOVUPS Z10, (DI)
	VMOVUPS Z11, 64(DI)
	ADDQ R8, DI
	VADDPS (DI), Z12, Z12
	VADDPS 64(DI), Z13, Z13
	VMOVUPS Z12, (DI)
	VMOVUPS Z13, 64(DI)
	ADDQ R8, DI
	VADDPS (DI), Z14, Z14
	VADDPS 64(DI), Z15, Z15
	VMOVUPS Z14, (DI)
	VMOVUPS Z15, 64(DI)
	VZEROUPPER
	RET

overwrite512:
	VMOVUPS Z4, (DI)
	VMOVUPS Z5, 64(DI)
	ADDQ R8, DI
	VMOVUPS Z6, (DI)
	VMOVUPS Z7, 64(DI)
	ADDQ R8, DI
	VMOVUPS Z8, (DI)
	VMOVUPS Z9, 64(DI)
	ADDQ R8, DI
	VMOVUPS Z10, (DI)
	VMOVUPS Z11, 64(DI)
	ADDQ R8, DI
	VMOVUPS Z12, (DI)
	VMOVUPS Z13, 64(DI)
	ADDQ R8, DI
	VMOVUPS Z14, (DI)
	VMOVUPS Z15, 64(DI)
	VZEROUPPER
	RET

// func dot4AVX2(k int, a, b0, b1, b2, b3, out *float32)
// out[r] = Σ_p a[p] · b_r[p] for r < 4, p < k: one row against four, for
// products with a few rows (decoding), where packing would cost more than
// it saves.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b0+16(FP), DX
	MOVQ b1+24(FP), R9
	MOVQ b2+32(FP), R10
	MOVQ b3+40(FP), R11
	MOVQ out+48(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $3, BX
	JEQ reduce

loop8:
	VMOVUPS (SI)(AX*1), Y4
	VFMADD231PS (DX)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	ADDQ $32, AX
	DECQ BX
	JNE loop8

reduce:
	VEXTRACTF128 $1, Y0, X4
	VADDPS X4, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VEXTRACTF128 $1, Y1, X4
	VADDPS X4, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VEXTRACTF128 $1, Y2, X4
	VADDPS X4, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VEXTRACTF128 $1, Y3, X4
	VADDPS X4, X3, X3
	VHADDPS X3, X3, X3
	VHADDPS X3, X3, X3
	ANDQ $7, CX
	JEQ done

tail:
	VMOVSS (SI)(AX*1), X4
	VFMADD231SS (DX)(AX*1), X4, X0
	VFMADD231SS (R9)(AX*1), X4, X1
	VFMADD231SS (R10)(AX*1), X4, X2
	VFMADD231SS (R11)(AX*1), X4, X3
	ADDQ $4, AX
	DECQ CX
	JNE tail

done:
	VMOVSS X0, (DI)
	VMOVSS X1, 4(DI)
	VMOVSS X2, 8(DI)
	VMOVSS X3, 12(DI)
	VZEROUPPER
	RET

// The exponential of expFloat32 (elementwise.go) for CPUs with AVX2 and
// FMA, eight lanes at a time, after Cephes' expf: x = k·ln2 + r with
// k = round(x·log2 e) and |r| ≤ ln2/2 (ln2 split in two constants),
// exp(r) ≈ 1 + r + r²·P(r) with a degree-5 polynomial, times 2^k built in
// the exponent bits. Relative error ~1e-7. Lanes below ln(2⁻¹²⁶) give 0
// (math.Exp gives a subnormal there); a block of eight with a lane above
// 88.376 (where 2^k would overflow the exponent) or NaN stops the loop, for
// the caller to finish it with math.Exp.

DATA expTab<>+0(SB)/4, $0x42b0c0a5
DATA expTab<>+4(SB)/4, $0x42b0c0a5
DATA expTab<>+8(SB)/4, $0x42b0c0a5
DATA expTab<>+12(SB)/4, $0x42b0c0a5
DATA expTab<>+16(SB)/4, $0x42b0c0a5
DATA expTab<>+20(SB)/4, $0x42b0c0a5
DATA expTab<>+24(SB)/4, $0x42b0c0a5
DATA expTab<>+28(SB)/4, $0x42b0c0a5
DATA expTab<>+32(SB)/4, $0xc2aeac50
DATA expTab<>+36(SB)/4, $0xc2aeac50
DATA expTab<>+40(SB)/4, $0xc2aeac50
DATA expTab<>+44(SB)/4, $0xc2aeac50
DATA expTab<>+48(SB)/4, $0xc2aeac50
DATA expTab<>+52(SB)/4, $0xc2aeac50
DATA expTab<>+56(SB)/4, $0xc2aeac50
DATA expTab<>+60(SB)/4, $0xc2aeac50
DATA expTab<>+64(SB)/4, $0x3fb8aa3b
DATA expTab<>+68(SB)/4, $0x3fb8aa3b
DATA expTab<>+72(SB)/4, $0x3fb8aa3b
DATA expTab<>+76(SB)/4, $0x3fb8aa3b
DATA expTab<>+80(SB)/4, $0x3fb8aa3b
DATA expTab<>+84(SB)/4, $0x3fb8aa3b
DATA expTab<>+88(SB)/4, $0x3fb8aa3b
DATA expTab<>+92(SB)/4, $0x3fb8aa3b
DATA expTab<>+96(SB)/4, $0x3f318000
DATA expTab<>+100(SB)/4, $0x3f318000
DATA expTab<>+104(SB)/4, $0x3f318000
DATA expTab<>+108(SB)/4, $0x3f318000
DATA expTab<>+112(SB)/4, $0x3f318000
DATA expTab<>+116(SB)/4, $0x3f318000
DATA expTab<>+120(SB)/4, $0x3f318000
DATA expTab<>+124(SB)/4, $0x3f318000
DATA expTab<>+128(SB)/4, $0xb95e8083
DATA expTab<>+132(SB)/4, $0xb95e8083
DATA expTab<>+136(SB)/4, $0xb95e8083
DATA expTab<>+140(SB)/4, $0xb95e8083
DATA expTab<>+144(SB)/4, $0xb95e8083
DATA expTab<>+148(SB)/4, $0xb95e8083
DATA expTab<>+152(SB)/4, $0xb95e8083
DATA expTab<>+156(SB)/4, $0xb95e8083
DATA expTab<>+160(SB)/4, $0x39506967
DATA expTab<>+164(SB)/4, $0x39506967
DATA expTab<>+168(SB)/4, $0x39506967
DATA expTab<>+172(SB)/4, $0x39506967
DATA expTab<>+176(SB)/4, $0x39506967
DATA expTab<>+180(SB)/4, $0x39506967
DATA expTab<>+184(SB)/4, $0x39506967
DATA expTab<>+188(SB)/4, $0x39506967
DATA expTab<>+192(SB)/4, $0x3ab743ce
DATA expTab<>+196(SB)/4, $0x3ab743ce
DATA expTab<>+200(SB)/4, $0x3ab743ce
DATA expTab<>+204(SB)/4, $0x3ab743ce
DATA expTab<>+208(SB)/4, $0x3ab743ce
DATA expTab<>+212(SB)/4, $0x3ab743ce
DATA expTab<>+216(SB)/4, $0x3ab743ce
DATA expTab<>+220(SB)/4, $0x3ab743ce
DATA expTab<>+224(SB)/4, $0x3c088908
DATA expTab<>+228(SB)/4, $0x3c088908
DATA expTab<>+232(SB)/4, $0x3c088908
DATA expTab<>+236(SB)/4, $0x3c088908
DATA expTab<>+240(SB)/4, $0x3c088908
DATA expTab<>+244(SB)/4, $0x3c088908
DATA expTab<>+248(SB)/4, $0x3c088908
DATA expTab<>+252(SB)/4, $0x3c088908
DATA expTab<>+256(SB)/4, $0x3d2aa9c1
DATA expTab<>+260(SB)/4, $0x3d2aa9c1
DATA expTab<>+264(SB)/4, $0x3d2aa9c1
DATA expTab<>+268(SB)/4, $0x3d2aa9c1
DATA expTab<>+272(SB)/4, $0x3d2aa9c1
DATA expTab<>+276(SB)/4, $0x3d2aa9c1
DATA expTab<>+280(SB)/4, $0x3d2aa9c1
DATA expTab<>+284(SB)/4, $0x3d2aa9c1
DATA expTab<>+288(SB)/4, $0x3e2aaaaa
DATA expTab<>+292(SB)/4, $0x3e2aaaaa
DATA expTab<>+296(SB)/4, $0x3e2aaaaa
DATA expTab<>+300(SB)/4, $0x3e2aaaaa
DATA expTab<>+304(SB)/4, $0x3e2aaaaa
DATA expTab<>+308(SB)/4, $0x3e2aaaaa
DATA expTab<>+312(SB)/4, $0x3e2aaaaa
DATA expTab<>+316(SB)/4, $0x3e2aaaaa
DATA expTab<>+320(SB)/4, $0x3f000000
DATA expTab<>+324(SB)/4, $0x3f000000
DATA expTab<>+328(SB)/4, $0x3f000000
DATA expTab<>+332(SB)/4, $0x3f000000
DATA expTab<>+336(SB)/4, $0x3f000000
DATA expTab<>+340(SB)/4, $0x3f000000
DATA expTab<>+344(SB)/4, $0x3f000000
DATA expTab<>+348(SB)/4, $0x3f000000
DATA expTab<>+352(SB)/4, $0x3f800000
DATA expTab<>+356(SB)/4, $0x3f800000
DATA expTab<>+360(SB)/4, $0x3f800000
DATA expTab<>+364(SB)/4, $0x3f800000
DATA expTab<>+368(SB)/4, $0x3f800000
DATA expTab<>+372(SB)/4, $0x3f800000
DATA expTab<>+376(SB)/4, $0x3f800000
DATA expTab<>+380(SB)/4, $0x3f800000
DATA expTab<>+384(SB)/4, $0x7f
DATA expTab<>+388(SB)/4, $0x7f
DATA expTab<>+392(SB)/4, $0x7f
DATA expTab<>+396(SB)/4, $0x7f
DATA expTab<>+400(SB)/4, $0x7f
DATA expTab<>+404(SB)/4, $0x7f
DATA expTab<>+408(SB)/4, $0x7f
DATA expTab<>+412(SB)/4, $0x7f
GLOBL expTab<>(SB), RODATA|NOPTR, $416

// func expAVX2(dst, x *float32, n int) (done int)
// dst[i] = exp(x[i]) for i < done: done is n rounded down to a multiple of
// 8, or the start of the first block of eight with a lane above 88.376 or NaN.
TEXT ·expAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	XORQ AX, AX
	TESTQ CX, CX
	JEQ expdone

exploop:
	VMOVUPS (SI)(AX*4), Y0
	VCMPPS $6, expTab<>+0(SB), Y0, Y5
	VMOVMSKPS Y5, BX
	TESTL BX, BX
	JNE expdone
	VCMPPS $1, expTab<>+32(SB), Y0, Y7
	VMAXPS expTab<>+32(SB), Y0, Y0
	VMULPS expTab<>+64(SB), Y0, Y1
	VROUNDPS $0, Y1, Y1
	VMOVAPS Y0, Y2
	VFNMADD231PS expTab<>+96(SB), Y1, Y2
	VFNMADD231PS expTab<>+128(SB), Y1, Y2
	VMULPS Y2, Y2, Y4
	VMOVUPS expTab<>+160(SB), Y3
	VFMADD213PS expTab<>+192(SB), Y2, Y3
	VFMADD213PS expTab<>+224(SB), Y2, Y3
	VFMADD213PS expTab<>+256(SB), Y2, Y3
	VFMADD213PS expTab<>+288(SB), Y2, Y3
	VFMADD213PS expTab<>+320(SB), Y2, Y3
	VFMADD213PS Y2, Y4, Y3
	VADDPS expTab<>+352(SB), Y3, Y3
	VCVTPS2DQ Y1, Y5
	VPADDD expTab<>+384(SB), Y5, Y5
	VPSLLD $23, Y5, Y5
	VMULPS Y5, Y3, Y3
	VANDNPS Y3, Y7, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ $8, AX
	DECQ CX
	JNE exploop

expdone:
	MOVQ AX, done+24(FP)
	VZEROUPPER
	RET

// func dot2x4AVX2(k int, a0, a1, b0, b1, b2, b3 *float32, out *[8]float32)
// out[4i + r] = Σ_p a_i[p] · b_r[p] for i < 2, r < 4, p < k rounded down to
// a multiple of 8 (the caller adds the rest): two rows against four, eight
// independent accumulators (Y0–Y7), for products with a few rows (decoding).
TEXT ·dot2x4AVX2(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a0+8(FP), SI
	MOVQ a1+16(FP), R8
	MOVQ b0+24(FP), DX
	MOVQ b1+32(FP), R9
	MOVQ b2+40(FP), R10
	MOVQ b3+48(FP), R11
	MOVQ out+56(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	SHRQ $3, CX
	JEQ reduce

loop8:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS (R8)(AX*1), Y9
	VMOVUPS (DX)(AX*1), Y10
	VMOVUPS (R9)(AX*1), Y11
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS (R10)(AX*1), Y12
	VMOVUPS (R11)(AX*1), Y13
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y12, Y9, Y6
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y13, Y9, Y7
	ADDQ $32, AX
	DECQ CX
	JNE loop8

reduce:
	// [Σ Y0, Σ Y1, Σ Y2, Σ Y3] into X0 and [Σ Y4, …, Σ Y7] into X4.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X0, (DI)
	VMOVUPS X4, 16(DI)
	VZEROUPPER
	RET

// func axpyAVX2(dst, x *float32, a float32, n int)
// dst[i] += a · x[i] for i < n rounded down to a multiple of 8 (the caller
// does the rest): a scaled row added into another (axpyNT).
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS a+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (DI)(AX*1), Y0
	VMOVUPS 32(DI)(AX*1), Y1
	VMOVUPS 64(DI)(AX*1), Y2
	VMOVUPS 96(DI)(AX*1), Y3
	VFMADD231PS (SI)(AX*1), Y8, Y0
	VFMADD231PS 32(SI)(AX*1), Y8, Y1
	VFMADD231PS 64(SI)(AX*1), Y8, Y2
	VFMADD231PS 96(SI)(AX*1), Y8, Y3
	VMOVUPS Y0, (DI)(AX*1)
	VMOVUPS Y1, 32(DI)(AX*1)
	VMOVUPS Y2, 64(DI)(AX*1)
	VMOVUPS Y3, 96(DI)(AX*1)
	ADDQ $128, AX
	DECQ BX
	JNE loop32

by8:
	ANDQ $31, CX
	SHRQ $3, CX
	JEQ done

loop8:
	VMOVUPS (DI)(AX*1), Y0
	VFMADD231PS (SI)(AX*1), Y8, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET
