// Package seed derives seeds from seeds: one mixer for every place that
// needs a seed per step, turn, chunk or batch from a run's seed.
package seed

// golden is 2⁶⁴/φ, splitmix64's increment.
const golden = 0x9e3779b97f4a7c15

// Mix derives a seed from base and salts, one splitmix64 step per salt:
// x ← x + golden + salt, then splitmix64's finalizer. Mix(s, a, b) equals
// Mix(Mix(s, a), b), and Mix(s) is s.
func Mix(base uint64, salts ...uint64) uint64 {
	x := base
	for _, s := range salts {
		x += golden + s
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
	}
	return x
}
