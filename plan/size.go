package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize takes: decimal (KB, MB, GB, TB) and
// binary (KiB, MiB, GiB, TiB) multiples of a byte.
var sizeUnits = []struct {
	suffix string
	bytes  float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseSize reads a memory size: a number followed by one of B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024),
// case-insensitive, e.g. "141GB", "80GiB", "1.5TB", "4096B". A number
// without a unit is refused: "141" is more likely 141 GB than 141 bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 0.0
	for _, u := range sizeUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.bytes
			break
		}
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || !(x > 0) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("size %q: want a positive number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (e.g. 141GB, 80GiB)", s)
	}
	if mult == 0 {
		return 0, fmt.Errorf("size %q has no unit: write %sGB (10^9 bytes) or %sGiB (2^30 bytes); units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB", s, t, t)
	}
	b := x * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// FormatSize writes bytes in decimal gigabytes with one decimal (the unit
// of GPU memory as vendors state it), or megabytes below a gigabyte.
func FormatSize(b int64) string {
	if b < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(b)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(b)/1e9)
}
