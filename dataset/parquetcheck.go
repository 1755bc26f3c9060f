package dataset

// Checking a Parquet file before parquet-go reads it. parquet-go trusts the
// sizes and offsets a file declares: a footer list of 2³¹ elements or a page
// claiming 2 GB is allocated as declared, a codec changed by one byte loops
// doubling its buffer until the process dies, and bad offsets panic inside
// the page-index reader. So before parquet.OpenFile sees a file, every
// structure it will decode is checked here against the file's real size,
// in bounded memory:
//
//   - the magic bytes, and a footer length inside the file;
//   - the footer's Thrift encoding walked without decoding it (every
//     length and element count no larger than the bytes left), then
//     decoded and checked: a well-formed schema tree, row counts that add
//     up, every column chunk inside the data part of the file, with a
//     codec this reader can decompress in bounded memory;
//   - every page of every column chunk, walked in order: a well-formed
//     header, the page inside its chunk, value counts within bounds and
//     adding up to the chunk's, the checksum when the page has one, and the
//     page's data decompressed (with the output bounded) to exactly the
//     size its header declares.
//
// Only then may parquet-go decode the same bytes: what it allocates is
// bounded by what was checked.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
)

// Bounds on what a Parquet file may declare.
const (
	maxFooterBytes     = 64 << 20  // the footer (FileMetaData)
	maxPageHeaderBytes = 1 << 20   // one page header, statistics included
	maxPageBytes       = 256 << 20 // one page, compressed or not
	maxPageValues      = 1 << 24   // values of one page (parquet-go allocates per value)
	maxSchemaElements  = 1 << 12   // schema tree nodes
	maxSchemaDepth     = 16        // nesting of the schema tree
	maxThriftDepth     = 32        // nesting of Thrift structures
)

// parquetChecker checks one file.
type parquetChecker struct {
	r    io.ReaderAt
	size int64
	zstd *zstd.Decoder // made on first use
}

// checkParquet checks the file r of size bytes (see the top of this file)
// and returns its metadata. Errors say what is wrong and where.
func checkParquet(r io.ReaderAt, size int64) (*format.FileMetaData, error) {
	c := &parquetChecker{r: r, size: size}
	defer func() {
		if c.zstd != nil {
			c.zstd.Close()
		}
	}()
	meta, dataEnd, err := c.footer()
	if err != nil {
		return nil, err
	}
	leaves, err := schemaLeaves(meta.Schema)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var rows int64
	for i := range meta.RowGroups {
		rg := &meta.RowGroups[i]
		if rg.NumRows < 0 {
			return nil, fmt.Errorf("row group %d: negative num_rows %d", i, rg.NumRows)
		}
		rows += rg.NumRows
		if rows > size { // every row takes at least a bit; no overflow either
			return nil, fmt.Errorf("row group %d: %d rows in all is more than a %d-byte file can hold", i, rows, size)
		}
		if len(rg.Columns) != len(leaves) {
			return nil, fmt.Errorf("row group %d: %d column chunks for %d columns", i, len(rg.Columns), len(leaves))
		}
		for j := range rg.Columns {
			if err := c.chunk(&rg.Columns[j], leaves[j], rg.NumRows, dataEnd); err != nil {
				return nil, fmt.Errorf("row group %d, column %s: %w", i, strings.Join(leaves[j].path, "."), err)
			}
		}
	}
	if rows != meta.NumRows {
		return nil, fmt.Errorf("the footer says %d rows but its row groups hold %d", meta.NumRows, rows)
	}
	return meta, nil
}

// footer reads, walks and decodes the footer; dataEnd is where the column
// data must end (the footer's first byte).
func (c *parquetChecker) footer() (*format.FileMetaData, int64, error) {
	if c.size < 12 {
		return nil, 0, fmt.Errorf("%d bytes is too short for a Parquet file (magic, footer, length, magic)", c.size)
	}
	var head, tail [4]byte
	var lenMagic [8]byte
	if _, err := c.r.ReadAt(head[:], 0); err != nil {
		return nil, 0, fmt.Errorf("reading the header: %w", err)
	}
	if _, err := c.r.ReadAt(lenMagic[:], c.size-8); err != nil {
		return nil, 0, fmt.Errorf("reading the footer length: %w", err)
	}
	copy(tail[:], lenMagic[4:])
	if string(head[:]) != "PAR1" || string(tail[:]) != "PAR1" {
		if string(head[:]) == "PARE" || string(tail[:]) == "PARE" {
			return nil, 0, errors.New("encrypted Parquet files are not supported")
		}
		return nil, 0, fmt.Errorf("not a Parquet file: magic bytes %q … %q, want \"PAR1\"", head[:], tail[:])
	}
	n := int64(binary.LittleEndian.Uint32(lenMagic[:4]))
	if n == 0 || n > c.size-12 {
		return nil, 0, fmt.Errorf("footer length %d does not fit in the %d-byte file", n, c.size)
	}
	if n > maxFooterBytes {
		return nil, 0, fmt.Errorf("footer length %d exceeds %d bytes", n, maxFooterBytes)
	}
	dataEnd := c.size - 8 - n
	footer := make([]byte, n)
	if _, err := c.r.ReadAt(footer, dataEnd); err != nil {
		return nil, 0, fmt.Errorf("reading the footer: %w", err)
	}
	w := thriftWalker{r: bytes.NewReader(footer), left: n}
	if err := w.structure(0); err != nil {
		return nil, 0, fmt.Errorf("footer: %w", err)
	}
	if w.left != 0 {
		return nil, 0, fmt.Errorf("footer: %d bytes after the metadata", w.left)
	}
	meta := new(format.FileMetaData)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), footer, meta); err != nil {
		return nil, 0, fmt.Errorf("footer: %w", err)
	}
	if meta.EncryptionAlgorithm.Value != nil || len(meta.FooterSigningKeyMetadata) > 0 {
		return nil, 0, errors.New("encrypted Parquet files are not supported")
	}
	return meta, dataEnd, nil
}

// leafInfo is one leaf column of the schema: its path, its physical type
// and its maximum repetition and definition levels.
type leafInfo struct {
	path           []string
	physical       format.Type
	typeLength     int  // FIXED_LEN_BYTE_ARRAY: bytes per value
	repeated       bool // some node on its path is REPEATED
	maxRep, maxDef int
}

// schemaLeaves checks the flattened schema tree (each node followed by its
// num_children children) and returns the leaves in order.
func schemaLeaves(schema []format.SchemaElement) ([]leafInfo, error) {
	if len(schema) == 0 {
		return nil, errors.New("no root element")
	}
	if len(schema) > maxSchemaElements {
		return nil, fmt.Errorf("%d elements, more than %d", len(schema), maxSchemaElements)
	}
	var leaves []leafInfo
	i := 0
	var walk func(path []string, rep, def, depth int) error
	walk = func(path []string, rep, def, depth int) error {
		if i >= len(schema) {
			return fmt.Errorf("the tree needs more than its %d elements", len(schema))
		}
		if depth > maxSchemaDepth {
			return fmt.Errorf("nested deeper than %d", maxSchemaDepth)
		}
		e := &schema[i]
		i++
		if depth > 0 {
			path = append(append([]string(nil), path...), e.Name)
			if !e.RepetitionType.Valid {
				return fmt.Errorf("element %q has no repetition type", strings.Join(path, "."))
			}
			switch e.RepetitionType.V {
			case format.Repeated:
				rep, def = rep+1, def+1
			case format.Optional:
				def++
			case format.Required:
			default:
				return fmt.Errorf("element %q has repetition type %d", strings.Join(path, "."), e.RepetitionType.V)
			}
		}
		kids := 0
		if e.NumChildren.Valid {
			kids = int(e.NumChildren.V)
		}
		if kids < 0 || kids > len(schema)-i {
			return fmt.Errorf("element %q has %d children, more than the %d elements left", e.Name, kids, len(schema)-i)
		}
		if kids == 0 {
			if depth == 0 {
				return errors.New("the root has no columns")
			}
			if !e.Type.Valid {
				return fmt.Errorf("leaf %q has no physical type", strings.Join(path, "."))
			}
			leaf := leafInfo{path: path, physical: e.Type.V, repeated: rep > 0, maxRep: rep, maxDef: def}
			if e.Type.V == format.FixedLenByteArray {
				if !e.TypeLength.Valid || e.TypeLength.V <= 0 {
					return fmt.Errorf("leaf %q: FIXED_LEN_BYTE_ARRAY without a positive type_length", strings.Join(path, "."))
				}
				leaf.typeLength = int(e.TypeLength.V)
			}
			leaves = append(leaves, leaf)
			return nil
		}
		for range kids {
			if err := walk(path, rep, def, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, 0, 0, 0); err != nil {
		return nil, err
	}
	if i != len(schema) {
		return nil, fmt.Errorf("%d elements after the root's tree", len(schema)-i)
	}
	return leaves, nil
}

// chunk checks one column chunk and walks its pages.
func (c *parquetChecker) chunk(cc *format.ColumnChunk, leaf leafInfo, rows, dataEnd int64) error {
	if cc.FilePath != "" {
		return fmt.Errorf("data in another file (%q) is not supported", cc.FilePath)
	}
	if cc.CryptoMetadata.Value != nil || len(cc.EncryptedColumnMetadata) > 0 {
		return errors.New("encrypted columns are not supported")
	}
	m := &cc.MetaData
	if strings.Join(m.PathInSchema, ".") != strings.Join(leaf.path, ".") {
		return fmt.Errorf("chunk is for column %q", strings.Join(m.PathInSchema, "."))
	}
	if m.Type != leaf.physical {
		return fmt.Errorf("chunk type %s differs from the schema's %s", m.Type, leaf.physical)
	}
	if err := checkCodec(m.Codec); err != nil {
		return err
	}
	if m.NumValues < rows || (!leaf.repeated && m.NumValues != rows) {
		return fmt.Errorf("num_values %d for %d rows", m.NumValues, rows)
	}
	start := m.DataPageOffset
	if m.DictionaryPageOffset != 0 {
		if m.DictionaryPageOffset >= m.DataPageOffset {
			return fmt.Errorf("dictionary_page_offset %d is not before data_page_offset %d", m.DictionaryPageOffset, m.DataPageOffset)
		}
		start = m.DictionaryPageOffset
	}
	if start < 4 || m.TotalCompressedSize < 0 || m.TotalCompressedSize > dataEnd-start {
		return fmt.Errorf("chunk at byte %d of %d bytes does not lie in the file's data (bytes 4..%d)", start, m.TotalCompressedSize, dataEnd)
	}
	if m.TotalUncompressedSize < 0 {
		return fmt.Errorf("negative total_uncompressed_size %d", m.TotalUncompressedSize)
	}
	return c.pages(m, start, leaf, rows)
}

// checkCodec accepts the codecs whose output can be bounded here.
func checkCodec(codec format.CompressionCodec) error {
	switch codec {
	case format.Uncompressed, format.Snappy, format.Gzip, format.Brotli, format.Zstd, format.Lz4Raw:
		return nil
	}
	return fmt.Errorf("compression codec %s is not supported (UNCOMPRESSED, SNAPPY, GZIP, BROTLI, ZSTD, LZ4_RAW)", codec)
}

// pages walks the pages of a chunk: they must fill it exactly, the first
// at its start (the dictionary page when it has one), the first data page
// at data_page_offset; their values add up to num_values and their rows
// (values starting a row) to the row group's; and every page's content is
// consistent with its header (parquetpage.go).
func (c *parquetChecker) pages(m *format.ColumnMetaData, start int64, leaf leafInfo, rows int64) error {
	sec := io.NewSectionReader(c.r, start, m.TotalCompressedSize)
	br := bufio.NewReaderSize(sec, 64<<10)
	var pos, values, pageRows int64
	sawData := false
	dictSize := -1 // no dictionary page
	for page := 0; pos < m.TotalCompressedSize; page++ {
		w := thriftWalker{r: br, left: m.TotalCompressedSize - pos, record: true}
		if err := w.structure(0); err != nil {
			return fmt.Errorf("page %d header at byte %d: %w", page, start+pos, err)
		}
		headerLen := m.TotalCompressedSize - pos - w.left
		h := new(format.PageHeader)
		if err := thrift.Unmarshal(new(thrift.CompactProtocol), w.rec, h); err != nil {
			return fmt.Errorf("page %d header at byte %d: %w", page, start+pos, err)
		}
		where := fmt.Sprintf("page %d at byte %d", page, start+pos)
		if h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 ||
			h.CompressedPageSize > maxPageBytes || h.UncompressedPageSize > maxPageBytes {
			return fmt.Errorf("%s: page sizes %d (compressed) and %d (uncompressed) out of range [0, %d]", where, h.CompressedPageSize, h.UncompressedPageSize, maxPageBytes)
		}
		if int64(h.CompressedPageSize) > w.left {
			return fmt.Errorf("%s: %d bytes of data run past the chunk's end (%d bytes left)", where, h.CompressedPageSize, w.left)
		}
		data := make([]byte, h.CompressedPageSize)
		if _, err := io.ReadFull(br, data); err != nil {
			return fmt.Errorf("%s: reading data: %w", where, err)
		}
		if h.CRC != 0 && crc32.ChecksumIEEE(data) != uint32(h.CRC) {
			return fmt.Errorf("%s: checksum mismatch (the page is corrupt)", where)
		}
		var n int32
		switch h.Type {
		case format.DictionaryPage:
			if !h.DictionaryPageHeader.Valid || page != 0 || start+pos != m.DictionaryPageOffset {
				return fmt.Errorf("%s: a dictionary page must be the chunk's first page, at dictionary_page_offset", where)
			}
			n = h.DictionaryPageHeader.V.NumValues
		case format.DataPage:
			if !h.DataPageHeader.Valid {
				return fmt.Errorf("%s: data page without its header", where)
			}
			n = h.DataPageHeader.V.NumValues
		case format.DataPageV2:
			if !h.DataPageHeaderV2.Valid {
				return fmt.Errorf("%s: data page v2 without its header", where)
			}
			n = h.DataPageHeaderV2.V.NumValues
		default:
			return fmt.Errorf("%s: page type %s is not supported", where, h.Type)
		}
		if n < 0 || n > maxPageValues {
			return fmt.Errorf("%s: %d values, want 0..%d", where, n, maxPageValues)
		}
		if h.Type != format.DictionaryPage {
			if !sawData && start+pos != m.DataPageOffset {
				return fmt.Errorf("%s: the first data page is not at data_page_offset %d", where, m.DataPageOffset)
			}
			sawData = true
			values += int64(n)
		}
		// The page's content, decompressed with its size bounded; a V2
		// page keeps its levels uncompressed in front.
		levels := int32(0)
		compressed := m.Codec != format.Uncompressed
		if h.Type == format.DataPageV2 {
			v2 := &h.DataPageHeaderV2.V
			if v2.NumNulls < 0 || v2.NumNulls > n || v2.NumRows < 0 || v2.NumRows > n ||
				v2.DefinitionLevelsByteLength < 0 || v2.RepetitionLevelsByteLength < 0 ||
				int64(v2.DefinitionLevelsByteLength)+int64(v2.RepetitionLevelsByteLength) > int64(min(h.CompressedPageSize, h.UncompressedPageSize)) {
				return fmt.Errorf("%s: inconsistent v2 header (values %d, nulls %d, rows %d, level bytes %d + %d of %d)",
					where, n, v2.NumNulls, v2.NumRows, v2.RepetitionLevelsByteLength, v2.DefinitionLevelsByteLength, h.CompressedPageSize)
			}
			levels = v2.DefinitionLevelsByteLength + v2.RepetitionLevelsByteLength
			if v2.IsCompressed.Valid && !v2.IsCompressed.V {
				compressed = false
			}
		}
		codec := m.Codec
		if !compressed {
			codec = format.Uncompressed
		}
		want := int(h.UncompressedPageSize - levels)
		content, err := c.decompress(codec, data[levels:], want)
		if err != nil {
			return fmt.Errorf("%s: %s data: %w", where, codec, err)
		}
		if len(content) != want {
			return fmt.Errorf("%s: data decompresses to %d bytes, the header says %d", where, len(content)+int(levels), h.UncompressedPageSize)
		}
		var r int64
		switch h.Type {
		case format.DictionaryPage:
			dictSize = int(n)
			err = checkDictionaryPage(content, int(n), h.DictionaryPageHeader.V.Encoding, leaf)
		case format.DataPage:
			r, err = checkDataPageV1(content, &h.DataPageHeader.V, leaf, dictSize)
		case format.DataPageV2:
			v2 := &h.DataPageHeaderV2.V
			rep := data[:v2.RepetitionLevelsByteLength]
			def := data[v2.RepetitionLevelsByteLength:levels]
			r, err = checkDataPageV2(rep, def, content, v2, leaf, dictSize)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		pageRows += r
		pos += headerLen + int64(h.CompressedPageSize)
	}
	if !sawData && m.NumValues > 0 {
		return errors.New("no data page")
	}
	if values != m.NumValues {
		return fmt.Errorf("its pages hold %d values, the chunk says num_values %d", values, m.NumValues)
	}
	if pageRows != rows {
		return fmt.Errorf("its pages hold %d rows, the row group %d", pageRows, rows)
	}
	return nil
}

// decompress decompresses data with codec, never producing more than want
// bytes plus one (so a page that decompresses to more is seen without
// holding all of it).
func (c *parquetChecker) decompress(codec format.CompressionCodec, data []byte, want int) ([]byte, error) {
	limited := func(r io.Reader) ([]byte, error) {
		return io.ReadAll(io.LimitReader(r, int64(want)+1))
	}
	switch codec {
	case format.Uncompressed:
		return data, nil
	case format.Snappy:
		n, err := snappy.DecodedLen(data)
		if err != nil {
			return nil, err
		}
		if n != want {
			return nil, fmt.Errorf("holds %d bytes, want %d", n, want)
		}
		return snappy.Decode(make([]byte, n), data)
	case format.Gzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return limited(zr)
	case format.Brotli:
		return limited(brotli.NewReader(bytes.NewReader(data)))
	case format.Zstd:
		if c.zstd == nil {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxPageBytes+1))
			if err != nil {
				return nil, err
			}
			c.zstd = d
		}
		if err := c.zstd.Reset(bytes.NewReader(data)); err != nil {
			return nil, err
		}
		return limited(c.zstd)
	case format.Lz4Raw:
		out := make([]byte, want)
		n, err := lz4.UncompressBlock(data, out)
		if err != nil {
			return nil, fmt.Errorf("not %d bytes of LZ4 data: %w", want, err)
		}
		return out[:n], nil
	}
	return nil, checkCodec(codec)
}

// thriftWalker walks one value of Thrift's compact protocol without
// decoding it, refusing any length or element count larger than the bytes
// left, and nesting deeper than maxThriftDepth. With record, it keeps the
// bytes it read (up to maxPageHeaderBytes) in rec.
type thriftWalker struct {
	r      io.ByteReader
	left   int64 // bytes that may still be read
	record bool
	rec    []byte
}

var errThriftEOF = errors.New("truncated Thrift structure")

func (w *thriftWalker) byte() (byte, error) {
	if w.left <= 0 {
		return 0, errThriftEOF
	}
	b, err := w.r.ReadByte()
	if err != nil {
		return 0, errThriftEOF
	}
	w.left--
	if w.record {
		if len(w.rec) >= maxPageHeaderBytes {
			return 0, fmt.Errorf("longer than %d bytes", maxPageHeaderBytes)
		}
		w.rec = append(w.rec, b)
	}
	return b, nil
}

func (w *thriftWalker) skip(n int64) error {
	if n > w.left {
		return fmt.Errorf("a value of %d bytes with only %d left", n, w.left)
	}
	for range n {
		if _, err := w.byte(); err != nil {
			return err
		}
	}
	return nil
}

// varint reads an unsigned LEB128 of at most maxBytes bytes.
func (w *thriftWalker) varint(maxBytes int) (uint64, error) {
	var x uint64
	for i := 0; i < maxBytes; i++ {
		b, err := w.byte()
		if err != nil {
			return 0, err
		}
		x |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, fmt.Errorf("a varint longer than %d bytes", maxBytes)
}

// Compact protocol type ids.
const (
	tBoolTrue  = 1
	tBoolFalse = 2
	tByte      = 3
	tI16       = 4
	tI32       = 5
	tI64       = 6
	tDouble    = 7
	tBinary    = 8
	tList      = 9
	tSet       = 10
	tMap       = 11
	tStruct    = 12
)

// structure walks a struct: fields until a stop byte.
func (w *thriftWalker) structure(depth int) error {
	if depth > maxThriftDepth {
		return fmt.Errorf("nested deeper than %d", maxThriftDepth)
	}
	for {
		b, err := w.byte()
		if err != nil {
			return err
		}
		if b == 0 {
			return nil
		}
		if b>>4 == 0 { // the field id follows as a zigzag i16
			if _, err := w.varint(3); err != nil {
				return err
			}
		}
		t := b & 0x0f
		if t == tBoolTrue || t == tBoolFalse {
			continue // a boolean field's value is its type
		}
		if err := w.value(t, depth); err != nil {
			return err
		}
	}
}

// value walks one value of type t (booleans inside containers are a byte).
func (w *thriftWalker) value(t byte, depth int) error {
	switch t {
	case tBoolTrue, tBoolFalse, tByte:
		_, err := w.byte()
		return err
	case tI16:
		_, err := w.varint(3)
		return err
	case tI32:
		_, err := w.varint(5)
		return err
	case tI64:
		_, err := w.varint(10)
		return err
	case tDouble:
		return w.skip(8)
	case tBinary:
		n, err := w.varint(5)
		if err != nil {
			return err
		}
		return w.skip(int64(n))
	case tList, tSet:
		b, err := w.byte()
		if err != nil {
			return err
		}
		n, et := uint64(b>>4), b&0x0f
		if n == 15 {
			if n, err = w.varint(5); err != nil {
				return err
			}
		}
		if et < tBoolTrue || et > tStruct {
			return fmt.Errorf("a list of unknown type %d", et)
		}
		if n > uint64(w.left) {
			return fmt.Errorf("a list of %d elements with %d bytes left", n, w.left)
		}
		for range n {
			if err := w.value(et, depth+1); err != nil {
				return err
			}
		}
		return nil
	case tMap:
		n, err := w.varint(5)
		if err != nil || n == 0 {
			return err
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		kt, vt := kv>>4, kv&0x0f
		if kt < tBoolTrue || kt > tStruct || vt < tBoolTrue || vt > tStruct {
			return fmt.Errorf("a map of unknown types %d, %d", kt, vt)
		}
		if 2*n > uint64(w.left) {
			return fmt.Errorf("a map of %d entries with %d bytes left", n, w.left)
		}
		for range n {
			if err := w.value(kt, depth+1); err != nil {
				return err
			}
			if err := w.value(vt, depth+1); err != nil {
				return err
			}
		}
		return nil
	case tStruct:
		return w.structure(depth + 1)
	}
	return fmt.Errorf("unknown Thrift type %d", t)
}
