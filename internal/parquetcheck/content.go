package parquetcheck

// The content of Parquet pages, checked against their headers before
// parquet-go decodes them: the repetition and definition levels (each in
// range, as many as the page's values; rows counted where the repetition
// level is 0), then the values the levels say are present — PLAIN values
// that fill the page exactly, or dictionary indices each inside the
// dictionary. A page header changed to claim more or fewer values, another
// encoding or another dictionary is an error here instead of values read
// short or shifted (parquet-go warns on stderr and reads on).
// Encodings this file does not decode (DELTA_*, BYTE_STREAM_SPLIT) have
// their levels checked only.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/parquet-go/parquet-go/format"
)

// checkDictionaryPage checks that a dictionary page holds exactly n PLAIN
// values.
func checkDictionaryPage(data []byte, n int, enc format.Encoding, leaf leafInfo) error {
	//lint:ignore SA1019 files written by older writers still use it: it is read, not written
	if enc != format.Plain && enc != format.PlainDictionary {
		return fmt.Errorf("dictionary page encoded %s, want PLAIN", enc)
	}
	if leaf.physical == format.Boolean {
		return errors.New("a dictionary of booleans")
	}
	return checkPlain(data, n, leaf)
}

// checkDataPageV1 checks a v1 data page: its levels (each with a 4-byte
// length in front), then its values. It returns the rows the page starts.
func checkDataPageV1(data []byte, h *format.DataPageHeader, leaf leafInfo, dictSize int) (int64, error) {
	n := int(h.NumValues)
	var rep, def []byte
	var err error
	if leaf.maxRep > 0 {
		if rep, data, err = prefixedLevels(data, h.RepetitionLevelEncoding, "repetition"); err != nil {
			return 0, err
		}
	}
	if leaf.maxDef > 0 {
		if def, data, err = prefixedLevels(data, h.DefinitionLevelEncoding, "definition"); err != nil {
			return 0, err
		}
	}
	return checkLevelsAndValues(rep, def, data, n, h.Encoding, leaf, dictSize)
}

// checkDataPageV2 checks a v2 data page: its levels (lengths in the
// header), then its values.
func checkDataPageV2(rep, def, values []byte, h *format.DataPageHeaderV2, leaf leafInfo, dictSize int) (int64, error) {
	if leaf.maxRep == 0 && len(rep) > 0 || leaf.maxDef == 0 && len(def) > 0 {
		return 0, errors.New("levels stored for a column that has none")
	}
	rows, err := checkLevelsAndValues(rep, def, values, int(h.NumValues), h.Encoding, leaf, dictSize)
	if err == nil && leaf.maxRep > 0 && rows != int64(h.NumRows) {
		err = fmt.Errorf("its levels start %d rows, the header says %d", rows, h.NumRows)
	}
	return rows, err
}

// prefixedLevels splits a v1 page's RLE levels (4-byte length, then the
// runs) off data.
func prefixedLevels(data []byte, enc format.Encoding, what string) ([]byte, []byte, error) {
	if enc != format.RLE {
		return nil, nil, fmt.Errorf("%s levels encoded %s, want RLE", what, enc)
	}
	if len(data) < 4 {
		return nil, nil, fmt.Errorf("%s levels: truncated length", what)
	}
	n := binary.LittleEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-4) {
		return nil, nil, fmt.Errorf("%s levels of %d bytes in %d", what, n, len(data)-4)
	}
	return data[4 : 4+n], data[4+n:], nil
}

// checkLevelsAndValues decodes n repetition and definition levels (when
// the column has them), counts the rows (repetition level 0) and the
// present values (definition level at its maximum), and checks the values.
func checkLevelsAndValues(rep, def, values []byte, n int, enc format.Encoding, leaf leafInfo, dictSize int) (int64, error) {
	rows := int64(n)
	if leaf.maxRep > 0 {
		rows = 0
		err := hybrid(rep, bits.Len(uint(leaf.maxRep)), n, func(v uint64, count int) error {
			if v > uint64(leaf.maxRep) {
				return fmt.Errorf("repetition level %d above the column's %d", v, leaf.maxRep)
			}
			if v == 0 {
				rows += int64(count)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("repetition levels: %w", err)
		}
	}
	present := n
	if leaf.maxDef > 0 {
		present = 0
		err := hybrid(def, bits.Len(uint(leaf.maxDef)), n, func(v uint64, count int) error {
			if v > uint64(leaf.maxDef) {
				return fmt.Errorf("definition level %d above the column's %d", v, leaf.maxDef)
			}
			if v == uint64(leaf.maxDef) {
				present += count
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("definition levels: %w", err)
		}
	}
	switch enc {
	case format.Plain:
		if err := checkPlain(values, present, leaf); err != nil {
			return 0, err
		}
	//lint:ignore SA1019 files written by older writers still use it: it is read, not written
	case format.PlainDictionary, format.RLEDictionary:
		if err := checkIndices(values, present, dictSize); err != nil {
			return 0, err
		}
	}
	return rows, nil
}

// checkPlain checks that data holds exactly n PLAIN values of the leaf's type.
func checkPlain(data []byte, n int, leaf leafInfo) error {
	size := 0
	switch leaf.physical {
	case format.Boolean:
		if len(data) != (n+7)/8 {
			return fmt.Errorf("%d PLAIN booleans in %d bytes, want %d", n, len(data), (n+7)/8)
		}
		return nil
	case format.Int32, format.Float:
		size = 4
	case format.Int64, format.Double:
		size = 8
	case format.Int96:
		size = 12
	case format.FixedLenByteArray:
		size = leaf.typeLength
	case format.ByteArray:
		pos := 0
		for i := 0; i < n; i++ {
			if len(data)-pos < 4 {
				return fmt.Errorf("PLAIN byte array %d of %d: truncated length", i, n)
			}
			l := int(binary.LittleEndian.Uint32(data[pos:]))
			pos += 4
			if l < 0 || l > len(data)-pos {
				return fmt.Errorf("PLAIN byte array %d of %d: %d bytes with %d left", i, n, l, len(data)-pos)
			}
			pos += l
		}
		if pos != len(data) {
			return fmt.Errorf("%d PLAIN byte arrays end at byte %d of %d", n, pos, len(data))
		}
		return nil
	default:
		return fmt.Errorf("physical type %s", leaf.physical)
	}
	if len(data) != n*size {
		return fmt.Errorf("%d PLAIN %s values in %d bytes, want %d", n, leaf.physical, len(data), n*size)
	}
	return nil
}

// checkIndices checks n dictionary indices (a bit width byte, then RLE
// runs), each inside a dictionary of dictSize values.
func checkIndices(data []byte, n, dictSize int) error {
	if dictSize < 0 {
		return errors.New("dictionary-encoded values without a dictionary page")
	}
	if n == 0 {
		return nil
	}
	if len(data) == 0 {
		return errors.New("dictionary indices: no bit width")
	}
	bw := int(data[0])
	if bw > 32 {
		return fmt.Errorf("dictionary indices of %d bits", bw)
	}
	return hybrid(data[1:], bw, n, func(v uint64, _ int) error {
		if v >= uint64(dictSize) {
			return fmt.Errorf("dictionary index %d in a dictionary of %d values", v, dictSize)
		}
		return nil
	})
}

// hybrid decodes n values of bw bits from Parquet's RLE / bit-packed
// hybrid encoding, calling fn for each run of equal values. Runs past n
// (the padding of the last bit-packed group) are ignored.
func hybrid(data []byte, bw, n int, fn func(v uint64, count int) error) error {
	if bw > 64 {
		return fmt.Errorf("bit width %d", bw)
	}
	byteWidth := (bw + 7) / 8
	pos, got := 0, 0
	for got < n {
		h, k := binary.Uvarint(data[pos:])
		if k <= 0 {
			return fmt.Errorf("truncated after %d of %d values", got, n)
		}
		pos += k
		if h&1 == 0 { // a run of one value
			count := h >> 1
			if count == 0 {
				return errors.New("an empty run")
			}
			if len(data)-pos < byteWidth {
				return fmt.Errorf("truncated run after %d of %d values", got, n)
			}
			var v uint64
			for i := 0; i < byteWidth; i++ {
				v |= uint64(data[pos+i]) << (8 * i)
			}
			pos += byteWidth
			if bw < 64 && v>>bw != 0 {
				return fmt.Errorf("value %d wider than %d bits", v, bw)
			}
			take := int(min(count, uint64(n-got)))
			if err := fn(v, take); err != nil {
				return err
			}
			got += take
			continue
		}
		groups := h >> 1 // bit-packed groups of 8 values
		if groups == 0 || groups > uint64(len(data)) {
			return fmt.Errorf("bit-packed run of %d groups", groups)
		}
		nbytes := int(groups) * bw
		if len(data)-pos < nbytes {
			return fmt.Errorf("truncated bit-packed run after %d of %d values", got, n)
		}
		packed := data[pos : pos+nbytes]
		pos += nbytes
		take := min(int(groups)*8, n-got)
		for i := 0; i < take; i++ {
			var v uint64
			for b := 0; b < bw; b++ {
				bit := i*bw + b
				v |= uint64(packed[bit/8]>>(bit%8)&1) << b
			}
			if err := fn(v, 1); err != nil {
				return err
			}
		}
		got += take
	}
	return nil
}
