package seed

import "testing"

// TestMix pins Mix against splitmix64's reference output (Vigna's
// splitmix64.c: the first two values from state 0 are e220a8397b1dcdaf and
// 6e789e6aa1b965f4) and its composition rule.
func TestMix(t *testing.T) {
	if got := Mix(0, 0); got != 0xe220a8397b1dcdaf {
		t.Errorf("Mix(0, 0) = %x, want splitmix64's first value e220a8397b1dcdaf", got)
	}
	if got := Mix(golden, 0); got != 0x6e789e6aa1b965f4 { // state golden: the second value
		t.Errorf("Mix(golden, 0) = %x, want splitmix64's second value 6e789e6aa1b965f4", got)
	}
	if Mix(42) != 42 {
		t.Error("Mix without salts must return the base")
	}
	if Mix(7, 3, 5) != Mix(Mix(7, 3), 5) {
		t.Error("Mix(s, a, b) != Mix(Mix(s, a), b)")
	}
	if Mix(7, 3) == Mix(7, 4) || Mix(7, 3) == Mix(8, 3) {
		t.Error("different salts or bases gave the same seed")
	}
}
