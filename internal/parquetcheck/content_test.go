package parquetcheck

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go/format"
)

func TestHybridDecodesRunsAndBitPackedGroups(t *testing.T) {
	// A run of five 1s (header 5<<1), then one bit-packed group (header
	// 1<<1|1) of eight 1-bit values 1,0,1,0,1,1,0,1 (0b10110101), of which
	// the first three are wanted.
	data := []byte{5 << 1, 1, 1<<1 | 1, 0b10110101}
	var got []uint64
	err := hybrid(data, 1, 8, func(v uint64, count int) error {
		for range count {
			got = append(got, v)
		}
		return nil
	})
	want := []uint64{1, 1, 1, 1, 1, 1, 0, 1}
	if err != nil || len(got) != len(want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, c := range []struct {
		name string
		data []byte
		bw   int
		want string
	}{
		{"truncated", []byte{5 << 1}, 1, "truncated run"},
		{"value too wide", []byte{5 << 1, 3}, 1, "wider than 1 bits"},
		{"empty run", []byte{0, 1}, 1, "an empty run"},
		{"bit-packed past the end", []byte{4<<1 | 1, 0xff}, 1, "bit-packed run of 4 groups"},
		{"bit-packed group cut", []byte{1<<1 | 1}, 3, "truncated bit-packed run"},
		{"no more runs", []byte{2 << 1, 1}, 1, "truncated after 2 of 8 values"},
	} {
		err := hybrid(c.data, c.bw, 8, func(uint64, int) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestPageContentMustMatchItsHeader(t *testing.T) {
	strs := func(ss ...string) []byte {
		var b []byte
		for _, s := range ss {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b
	}
	byteArray := leafInfo{physical: format.ByteArray}
	if err := checkDictionaryPage(strs("banking", "slack"), 2, format.Plain, byteArray); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a dictionary claiming one value more", checkDictionaryPage(strs("banking", "slack"), 3, format.Plain, byteArray), "truncated length"},
		{"a dictionary claiming one value less", checkDictionaryPage(strs("banking", "slack"), 1, format.Plain, byteArray), "end at byte 11 of 20"},
		{"a dictionary in another encoding", checkDictionaryPage(strs("a"), 1, format.RLE, byteArray), "want PLAIN"},
		{"int32 values short", checkPlain(make([]byte, 7), 2, leafInfo{physical: format.Int32}), "want 8"},
		{"booleans long", checkPlain(make([]byte, 2), 3, leafInfo{physical: format.Boolean}), "want 1"},
		{"an index outside the dictionary", checkIndices([]byte{2, 4 << 1, 3}, 4, 3), "index 3 in a dictionary of 3"},
		{"indices without a dictionary", checkIndices([]byte{1, 2, 0}, 1, -1), "without a dictionary page"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, c.err, c.want)
		}
	}
	// Levels: a repeated optional column (max rep 1, def 2) of 4 values in
	// 2 rows, of which 3 are present: rep 0,1,0,1 and def 2,2,1,2 (bit-packed,
	// least significant bit first).
	leaf := leafInfo{physical: format.ByteArray, maxRep: 1, maxDef: 2, repeated: true}
	rep := []byte{1<<1 | 1, 0b1010}
	def := []byte{1<<1 | 1, 0b10_01_10_10, 0}
	rows, err := checkLevelsAndValues(rep, def, strs("a", "b", "c"), 4, format.Plain, leaf, -1)
	if err != nil || rows != 2 {
		t.Fatalf("rows %d, %v; want 2", rows, err)
	}
	if _, err := checkLevelsAndValues(rep, def, strs("a", "b", "c", "d"), 4, format.Plain, leaf, -1); err == nil {
		t.Fatal("4 values where the levels say 3: no error")
	}
	if _, err := checkLevelsAndValues(rep, []byte{4 << 1, 3}, strs("a"), 4, format.Plain, leaf, -1); err == nil ||
		!strings.Contains(err.Error(), "definition level 3 above the column's 2") {
		t.Fatalf("definition level 3: %v", err)
	}
}
