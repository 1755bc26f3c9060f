#include "textflag.h"

// Elementwise float32 loops for CPUs with AVX2 (elementwise_amd64.go): 32
// values per iteration in four YMM registers, then 8 at a time; the last
// n mod 8 values are left to the Go caller.

// func addVecAVX2(dst, a, b *float32, n int)
// dst[i] = a[i] + b[i] for i < n rounded down to a multiple of 8.
TEXT ·addVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VADDPS (DX)(AX*1), Y0, Y0
	VADDPS 32(DX)(AX*1), Y1, Y1
	VADDPS 64(DX)(AX*1), Y2, Y2
	VADDPS 96(DX)(AX*1), Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VADDPS (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func subVecAVX2(dst, a, b *float32, n int)
// dst[i] = a[i] - b[i] for i < n rounded down to a multiple of 8.
TEXT ·subVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VSUBPS (DX)(AX*1), Y0, Y0
	VSUBPS 32(DX)(AX*1), Y1, Y1
	VSUBPS 64(DX)(AX*1), Y2, Y2
	VSUBPS 96(DX)(AX*1), Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VSUBPS (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func mulVecAVX2(dst, a, b *float32, n int)
// dst[i] = a[i] * b[i] for i < n rounded down to a multiple of 8.
TEXT ·mulVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VMULPS (DX)(AX*1), Y0, Y0
	VMULPS 32(DX)(AX*1), Y1, Y1
	VMULPS 64(DX)(AX*1), Y2, Y2
	VMULPS 96(DX)(AX*1), Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VMULPS (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func divVecAVX2(dst, a, b *float32, n int)
// dst[i] = a[i] / b[i] for i < n rounded down to a multiple of 8.
TEXT ·divVecAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VDIVPS (DX)(AX*1), Y0, Y0
	VDIVPS 32(DX)(AX*1), Y1, Y1
	VDIVPS 64(DX)(AX*1), Y2, Y2
	VDIVPS 96(DX)(AX*1), Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VDIVPS (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func addScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = x[i] + c for i < n rounded down to a multiple of 8.
TEXT ·addScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VADDPS Y8, Y0, Y0
	VADDPS Y8, Y1, Y1
	VADDPS Y8, Y2, Y2
	VADDPS Y8, Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VADDPS Y8, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func mulScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = x[i] * c for i < n rounded down to a multiple of 8.
TEXT ·mulScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VMULPS Y8, Y0, Y0
	VMULPS Y8, Y1, Y1
	VMULPS Y8, Y2, Y2
	VMULPS Y8, Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VMULPS Y8, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func subScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = x[i] - c for i < n rounded down to a multiple of 8.
TEXT ·subScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VSUBPS Y8, Y0, Y0
	VSUBPS Y8, Y1, Y1
	VSUBPS Y8, Y2, Y2
	VSUBPS Y8, Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VSUBPS Y8, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func rsubScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = c - x[i] for i < n rounded down to a multiple of 8.
TEXT ·rsubScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VSUBPS Y0, Y8, Y0
	VSUBPS Y1, Y8, Y1
	VSUBPS Y2, Y8, Y2
	VSUBPS Y3, Y8, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VSUBPS Y0, Y8, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func divScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = x[i] / c for i < n rounded down to a multiple of 8.
TEXT ·divScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VDIVPS Y8, Y0, Y0
	VDIVPS Y8, Y1, Y1
	VDIVPS Y8, Y2, Y2
	VDIVPS Y8, Y3, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VDIVPS Y8, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func rdivScalarAVX2(dst, x *float32, c float32, n int)
// dst[i] = c / x[i] for i < n rounded down to a multiple of 8.
TEXT ·rdivScalarAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS c+16(FP), Y8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS 32(SI)(AX*1), Y1
	VMOVUPS 64(SI)(AX*1), Y2
	VMOVUPS 96(SI)(AX*1), Y3
	VDIVPS Y0, Y8, Y0
	VDIVPS Y1, Y8, Y1
	VDIVPS Y2, Y8, Y2
	VDIVPS Y3, Y8, Y3
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
	VMOVUPS (SI)(AX*1), Y0
	VDIVPS Y0, Y8, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VZEROUPPER
	RET

// func sum8AVX2(x *float32, n int, out *[8]float32)
// out[l] = Σ x[8j + l] over the whole blocks of 8.
TEXT ·sum8AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $5, BX
	JEQ by8

loop32:
	VADDPS (SI)(AX*1), Y0, Y0
	VADDPS 32(SI)(AX*1), Y1, Y1
	VADDPS 64(SI)(AX*1), Y2, Y2
	VADDPS 96(SI)(AX*1), Y3, Y3
	ADDQ $128, AX
	DECQ BX
	JNE loop32

by8:
	ANDQ $31, CX
	SHRQ $3, CX
	JEQ done

loop8:
	VADDPS (SI)(AX*1), Y0, Y0
	ADDQ $32, AX
	DECQ CX
	JNE loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func max8AVX2(x *float32, n int, out *[8]float32) (nan bool)
// out[l] = max x[8j + l] over the whole blocks of 8 (n ≥ 8), and whether
// any of those values is NaN (VMAXPS alone would lose it).
TEXT ·max8AVX2(SB), NOSPLIT, $0-25
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	VMOVUPS (SI), Y0
	VMOVUPS Y0, Y1
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $4, BX
	JEQ by8

loop16:
	VMOVUPS (SI)(AX*1), Y2
	VMOVUPS 32(SI)(AX*1), Y3
	VMAXPS Y2, Y0, Y0
	VMAXPS Y3, Y1, Y1
	VCMPPS $3, Y2, Y2, Y4
	VCMPPS $3, Y3, Y3, Y5
	VORPS Y4, Y8, Y8
	VORPS Y5, Y9, Y9
	ADDQ $64, AX
	DECQ BX
	JNE loop16

by8:
	ANDQ $15, CX
	SHRQ $3, CX
	JEQ done

	VMOVUPS (SI)(AX*1), Y2
	VMAXPS Y2, Y0, Y0
	VCMPPS $3, Y2, Y2, Y4
	VORPS Y4, Y8, Y8

done:
	VMAXPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	VORPS Y9, Y8, Y8
	VPTEST Y8, Y8
	SETNE nan+24(FP)
	VZEROUPPER
	RET
