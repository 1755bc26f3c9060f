// Package parquetcheck checks a Parquet file before parquet-go reads it:
// parquet-go trusts the sizes and offsets a file declares (a footer list
// of 2³¹ elements is allocated as declared, a changed codec byte can loop
// until out of memory). Check walks the magic, the footer's Thrift
// encoding, the schema and every page of every column chunk against the
// file's real size, in bounded memory, decompressing each page to exactly
// its declared size (content.go), so that what parquet-go then allocates
// is bounded by what was checked (docs/reliability.md#inputs).
package parquetcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
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

// checker checks one file.
type checker struct {
	r    io.ReaderAt
	size int64
	zstd *zstd.Decoder // made on first use
}

// Check checks the Parquet file r of size bytes (see the package comment)
// and returns its metadata. Errors say what is wrong and where.
func Check(r io.ReaderAt, size int64) (*format.FileMetaData, error) {
	c := &checker{r: r, size: size}
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
func (c *checker) footer() (*format.FileMetaData, int64, error) {
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

// chunk checks one column chunk and walks its pages.
func (c *checker) chunk(cc *format.ColumnChunk, leaf leafInfo, rows, dataEnd int64) error {
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
