package parquetcheck

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"
)

// pageWalk is the walk over the pages of one column chunk.
type pageWalk struct {
	m        *format.ColumnMetaData
	start    int64 // the chunk's first byte in the file
	leaf     leafInfo
	br       *bufio.Reader // the chunk's bytes from start
	pos      int64         // the current page's offset from start
	values   int64         // values of the data pages so far
	rows     int64         // rows the data pages start, so far
	sawData  bool          // a data page was seen
	dictSize int           // values of the dictionary page; -1 for none
}

// pages walks the pages of a chunk: they must fill it exactly, the first
// at its start (the dictionary page when it has one), the first data page
// at data_page_offset; their values add up to num_values and their rows
// (values starting a row) to the row group's; and every page's content is
// consistent with its header (content.go).
func (c *checker) pages(m *format.ColumnMetaData, start int64, leaf leafInfo, rows int64) error {
	sec := io.NewSectionReader(c.r, start, m.TotalCompressedSize)
	w := &pageWalk{m: m, start: start, leaf: leaf, br: bufio.NewReaderSize(sec, 64<<10), dictSize: -1}
	for page := 0; w.pos < m.TotalCompressedSize; page++ {
		if err := c.page(w, page); err != nil {
			return err
		}
	}
	if !w.sawData && m.NumValues > 0 {
		return errors.New("no data page")
	}
	if w.values != m.NumValues {
		return fmt.Errorf("its pages hold %d values, the chunk says num_values %d", w.values, m.NumValues)
	}
	if w.rows != rows {
		return fmt.Errorf("its pages hold %d rows, the row group %d", w.rows, rows)
	}
	return nil
}

// page checks the page at w.pos, the page-th of its chunk, and moves w past
// it.
func (c *checker) page(w *pageWalk, page int) error {
	h, headerLen, data, err := w.read(page)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("page %d at byte %d", page, w.start+w.pos)
	n, err := w.count(h, page)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	content, levels, err := c.content(h, w.m.Codec, data, n)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var r int64
	switch h.Type {
	case format.DictionaryPage:
		w.dictSize = int(n)
		err = checkDictionaryPage(content, int(n), h.DictionaryPageHeader.V.Encoding, w.leaf)
	case format.DataPage:
		r, err = checkDataPageV1(content, &h.DataPageHeader.V, w.leaf, w.dictSize)
	case format.DataPageV2:
		v2 := &h.DataPageHeaderV2.V
		rep := data[:v2.RepetitionLevelsByteLength]
		def := data[v2.RepetitionLevelsByteLength:levels]
		r, err = checkDataPageV2(rep, def, content, v2, w.leaf, w.dictSize)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	w.rows += r
	w.pos += headerLen + int64(h.CompressedPageSize)
	return nil
}

// read reads the header and the data of the page at w.pos: a well-formed
// header, page sizes in range, the data inside the chunk, and its checksum
// when the header has one.
func (w *pageWalk) read(page int) (h *format.PageHeader, headerLen int64, data []byte, err error) {
	left := w.m.TotalCompressedSize - w.pos
	tw := thriftWalker{r: w.br, left: left, record: true}
	if err := tw.structure(0); err != nil {
		return nil, 0, nil, fmt.Errorf("page %d header at byte %d: %w", page, w.start+w.pos, err)
	}
	headerLen = left - tw.left
	h = new(format.PageHeader)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), tw.rec, h); err != nil {
		return nil, 0, nil, fmt.Errorf("page %d header at byte %d: %w", page, w.start+w.pos, err)
	}
	where := fmt.Sprintf("page %d at byte %d", page, w.start+w.pos)
	if h.CompressedPageSize < 0 || h.UncompressedPageSize < 0 ||
		h.CompressedPageSize > maxPageBytes || h.UncompressedPageSize > maxPageBytes {
		return nil, 0, nil, fmt.Errorf("%s: page sizes %d (compressed) and %d (uncompressed) out of range [0, %d]", where, h.CompressedPageSize, h.UncompressedPageSize, maxPageBytes)
	}
	if int64(h.CompressedPageSize) > tw.left {
		return nil, 0, nil, fmt.Errorf("%s: %d bytes of data run past the chunk's end (%d bytes left)", where, h.CompressedPageSize, tw.left)
	}
	data = make([]byte, h.CompressedPageSize)
	if _, err := io.ReadFull(w.br, data); err != nil {
		return nil, 0, nil, fmt.Errorf("%s: reading data: %w", where, err)
	}
	if h.CRC != 0 && crc32.ChecksumIEEE(data) != uint32(h.CRC) {
		return nil, 0, nil, fmt.Errorf("%s: checksum mismatch (the page is corrupt)", where)
	}
	return h, headerLen, data, nil
}

// count returns the values of the page with header h, the page-th of its
// chunk: a page of a known type with its own header, a dictionary page
// only first and at dictionary_page_offset, the first data page at
// data_page_offset. It adds a data page's values to w's.
func (w *pageWalk) count(h *format.PageHeader, page int) (int32, error) {
	var n int32
	switch h.Type {
	case format.DictionaryPage:
		if !h.DictionaryPageHeader.Valid || page != 0 || w.start+w.pos != w.m.DictionaryPageOffset {
			return 0, errors.New("a dictionary page must be the chunk's first page, at dictionary_page_offset")
		}
		n = h.DictionaryPageHeader.V.NumValues
	case format.DataPage:
		if !h.DataPageHeader.Valid {
			return 0, errors.New("data page without its header")
		}
		n = h.DataPageHeader.V.NumValues
	case format.DataPageV2:
		if !h.DataPageHeaderV2.Valid {
			return 0, errors.New("data page v2 without its header")
		}
		n = h.DataPageHeaderV2.V.NumValues
	default:
		return 0, fmt.Errorf("page type %s is not supported", h.Type)
	}
	if n < 0 || n > maxPageValues {
		return 0, fmt.Errorf("%d values, want 0..%d", n, maxPageValues)
	}
	if h.Type != format.DictionaryPage {
		if !w.sawData && w.start+w.pos != w.m.DataPageOffset {
			return 0, fmt.Errorf("the first data page is not at data_page_offset %d", w.m.DataPageOffset)
		}
		w.sawData = true
		w.values += int64(n)
	}
	return n, nil
}

// content returns the content of a page of n values with header h and
// data, decompressed with its size bounded to exactly what the header
// declares. A v2 page keeps its levels, the first levels bytes of data,
// uncompressed in front; content is what follows them.
func (c *checker) content(h *format.PageHeader, codec format.CompressionCodec, data []byte, n int32) (content []byte, levels int32, err error) {
	compressed := codec != format.Uncompressed
	if h.Type == format.DataPageV2 {
		v2 := &h.DataPageHeaderV2.V
		if v2.NumNulls < 0 || v2.NumNulls > n || v2.NumRows < 0 || v2.NumRows > n ||
			v2.DefinitionLevelsByteLength < 0 || v2.RepetitionLevelsByteLength < 0 ||
			int64(v2.DefinitionLevelsByteLength)+int64(v2.RepetitionLevelsByteLength) > int64(min(h.CompressedPageSize, h.UncompressedPageSize)) {
			return nil, 0, fmt.Errorf("inconsistent v2 header (values %d, nulls %d, rows %d, level bytes %d + %d of %d)",
				n, v2.NumNulls, v2.NumRows, v2.RepetitionLevelsByteLength, v2.DefinitionLevelsByteLength, h.CompressedPageSize)
		}
		levels = v2.DefinitionLevelsByteLength + v2.RepetitionLevelsByteLength
		if v2.IsCompressed.Valid && !v2.IsCompressed.V {
			compressed = false
		}
	}
	if !compressed {
		codec = format.Uncompressed
	}
	want := int(h.UncompressedPageSize - levels)
	content, err = c.decompress(codec, data[levels:], want)
	if err != nil {
		return nil, 0, fmt.Errorf("%s data: %w", codec, err)
	}
	if len(content) != want {
		return nil, 0, fmt.Errorf("data decompresses to %d bytes, the header says %d", len(content)+int(levels), h.UncompressedPageSize)
	}
	return content, levels, nil
}

// decompress decompresses data with codec, never producing more than want
// bytes plus one (so a page that decompresses to more is seen without
// holding all of it).
func (c *checker) decompress(codec format.CompressionCodec, data []byte, want int) ([]byte, error) {
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
