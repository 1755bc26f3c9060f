package safetensors

import (
	"math"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// Storage dtypes this package reads and writes, as the header names them.
const (
	F32  = "F32"
	BF16 = "BF16"
	F16  = "F16"
)

// width is the size in bytes of one element of each supported dtype.
var width = map[string]int64{F32: 4, BF16: 2, F16: 2}

// BF16FromFloat32 rounds x to the nearest bfloat16, ties to even (NaN stays
// NaN): the rounding used whenever a float32 is stored as BF16.
func BF16FromFloat32(x float32) bfloat16.BFloat16 {
	bits := math.Float32bits(x)
	if x != x {
		return bfloat16.FromBits(uint16(bits>>16) | 0x40)
	}
	bits += 0x7FFF + (bits>>16)&1
	return bfloat16.FromBits(uint16(bits >> 16))
}

// f16ToFloat32 widens an IEEE half-precision value (exact).
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value = mant · 2⁻²⁴
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// f16FromFloat32 rounds x to the nearest IEEE half, ties to even.
func f16FromFloat32(x float32) uint16 {
	bits := math.Float32bits(x)
	sign := uint16(bits>>16) & 0x8000
	if x != x {
		return sign | 0x7e00
	}
	exp := int32(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	if exp >= 0x1f { // overflow (or inf)
		return sign | 0x7c00
	}
	if exp <= 0 { // subnormal or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is still correct
	}
	return sign | uint16(half)
}

// littleEndianHost reports whether this machine stores numbers
// little-endian, as safetensors data is: only then may bytes be copied as
// they are.
var littleEndianHost = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
