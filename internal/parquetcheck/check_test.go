package parquetcheck

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// testRow has the shapes of a trajectory row: a dictionary column, an
// optional one and a list of structs.
type testRow struct {
	ID    string     `parquet:"id"`
	Suite string     `parquet:"suite,dict"`
	Note  *string    `parquet:"note,optional"`
	Items []testItem `parquet:"items,list"`
}

type testItem struct {
	Name  string `parquet:"name,dict"`
	Label int32  `parquet:"label"`
}

// testFile writes rows rows with parquet-go (ZSTD, as dataset writes).
func testFile(t testing.TB, rows int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[testRow](&buf, parquet.Compression(&zstd.Codec{}))
	note := "a note"
	batch := make([]testRow, rows)
	for i := range batch {
		batch[i] = testRow{ID: strings.Repeat("x", i+1), Suite: []string{"banking", "slack"}[i%2],
			Items: make([]testItem, i%3)}
		if i%2 == 0 {
			batch[i].Note = &note
		}
		for j := range batch[i].Items {
			batch[i].Items[j] = testItem{Name: "f", Label: int32(j % 2)}
		}
	}
	if _, err := w.Write(batch); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withFooter returns file with its footer decoded, changed by edit and
// encoded again.
func withFooter(t *testing.T, file []byte, edit func(*format.FileMetaData)) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(file[len(file)-8:]))
	start := len(file) - 8 - n
	meta := new(format.FileMetaData)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), file[start:len(file)-8], meta); err != nil {
		t.Fatal(err)
	}
	edit(meta)
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), meta)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), file[:start]...)
	out = append(out, footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	return append(out, "PAR1"...)
}

func TestCheckAcceptsWhatParquetGoWrites(t *testing.T) {
	file := testFile(t, 10)
	meta, err := Check(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if meta.NumRows != 10 {
		t.Fatalf("%d rows, want the 10 written", meta.NumRows)
	}
}

func TestCheckRefusesWhatParquetGoWouldMisread(t *testing.T) {
	file := testFile(t, 10)
	firstChunk := func(m *format.FileMetaData) *format.ColumnMetaData { return &m.RowGroups[0].Columns[0].MetaData }
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"too short", file[:11], "too short for a Parquet file"},
		{"no magic", append([]byte("PAR0"), file[4:]...), "not a Parquet file"},
		{"encrypted", append(append([]byte(nil), file[:len(file)-4]...), "PARE"...), "encrypted Parquet files"},
		{"footer longer than the file", append(append([]byte(nil), file[:len(file)-8]...), 0xff, 0xff, 0xff, 0x00, 'P', 'A', 'R', '1'), "does not fit"},
		{"ZSTD data said to be LZ4_RAW", withFooter(t, file, func(m *format.FileMetaData) {
			firstChunk(m).Codec = format.Lz4Raw
		}), "LZ4_RAW data"},
		{"a codec without a bounded decoder", withFooter(t, file, func(m *format.FileMetaData) {
			firstChunk(m).Codec = format.LZO
		}), "compression codec LZO is not supported"},
		{"a chunk past the data", withFooter(t, file, func(m *format.FileMetaData) {
			firstChunk(m).TotalCompressedSize += int64(len(file))
		}), "does not lie in the file's data"},
		{"one value more than the pages hold", withFooter(t, file, func(m *format.FileMetaData) {
			firstChunk(m).NumValues++
		}), "num_values 11 for 10 rows"},
		{"one row more than the row groups hold", withFooter(t, file, func(m *format.FileMetaData) {
			m.NumRows++
		}), "the footer says 11 rows but its row groups hold 10"},
		{"a column lost from the schema", withFooter(t, file, func(m *format.FileMetaData) {
			m.Schema = append(m.Schema[:1:1], m.Schema[2:]...)
			m.Schema[0].NumChildren.V--
		}), "column chunks for"},
	} {
		_, err := Check(bytes.NewReader(c.file), int64(len(c.file)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzParquetCheck: Check returns metadata or an error for any file —
// never a panic, a runaway allocation or a hang. The seeds are a small
// file of parquet-go's and copies with a byte of its footer changed.
func FuzzParquetCheck(f *testing.F) {
	seed := testFile(f, 10)
	f.Add(seed)
	footer := len(seed) - 8 - int(binary.LittleEndian.Uint32(seed[len(seed)-8:]))
	for _, i := range []int{footer + 10, footer + len(seed[footer:])/2, len(seed) - 30} {
		for _, v := range []byte{0xff, 14} {
			b := append([]byte(nil), seed...)
			b[i] = v
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		meta, err := Check(bytes.NewReader(data), int64(len(data)))
		if err == nil && meta.NumRows > int64(len(data)) {
			t.Fatalf("%d rows accepted in a %d-byte file", meta.NumRows, len(data))
		}
	})
}
