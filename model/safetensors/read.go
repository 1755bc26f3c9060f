// Package safetensors reads and writes the safetensors file format: an
// 8-byte little-endian header length N, N bytes of JSON {"name": {"dtype":
// "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__":
// {...}}, then the raw little-endian data; offsets are relative to the end
// of the header.
//
// It knows no model: a file is a set of named tensors. Reading checks the
// header against the file's real size before anything is allocated, then
// goes tensor by tensor straight from the file into the destination tensor
// (converting dtype in small chunks when needed), so a checkpoint is never
// held twice in memory. F32, BF16 and F16 are read into float32 or bfloat16
// tensors, and written from them.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// maxHeaderBytes bounds the JSON header (the format's reference
// implementation uses 100 MB).
const maxHeaderBytes = 100 << 20

// maxTensorRank bounds the dimensions of a stored tensor.
const maxTensorRank = 8

// Entry is one tensor of a header.
type Entry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"` // [begin, end) in bytes, from the start of the data (File.DataStart)
}

// Elements is the number of elements of the tensor.
func (e Entry) Elements() int64 {
	n := int64(1)
	for _, d := range e.Shape {
		n *= int64(d)
	}
	return n
}

// File is an open safetensors file whose header has been checked.
type File struct {
	path      string
	f         *os.File
	size      int64
	dataStart int64
	entries   map[string]Entry
}

// Open opens path and validates its header: length, JSON, dtypes, and that
// every tensor's byte range matches its shape and lies inside the file.
// Errors name the file (and the tensor).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := readHeader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return st, nil
}

func readHeader(path string, f *os.File) (*File, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	size := info.Size()
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("safetensors %s: file of %d bytes is too short for a header", path, size)
	}
	hlen := binary.LittleEndian.Uint64(lenBuf[:])
	if hlen > maxHeaderBytes || int64(hlen) > size-8 {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the file size %d (truncated or not a safetensors file)", path, hlen, size)
	}
	header := make([]byte, hlen)
	if _, err := io.ReadFull(f, header); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: bad JSON header: %w", path, err)
	}
	if where, problem, ok := strictjson.Check(header); !ok {
		return nil, fmt.Errorf("safetensors %s: header: %s: %s", path, where, problem)
	}
	st := &File{path: path, f: f, size: size, dataStart: 8 + int64(hlen), entries: map[string]Entry{}}
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		e, err := parseEntry(msg, size-st.dataStart)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %s: %w", path, name, err)
		}
		st.entries[name] = e
	}
	if err := checkContiguous(st.entries, size-st.dataStart); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return st, nil
}

// parseEntry decodes and checks one tensor's header entry against the
// dataLen bytes of data the file holds.
func parseEntry(msg json.RawMessage, dataLen int64) (Entry, error) {
	var e Entry
	var offsets struct {
		Offsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(msg, &e); err != nil {
		return e, fmt.Errorf("bad header entry: %w", err)
	}
	if json.Unmarshal(msg, &offsets) != nil || len(offsets.Offsets) != 2 {
		return e, fmt.Errorf("data_offsets must be [begin, end]")
	}
	w, ok := width[e.DType]
	if !ok {
		return e, fmt.Errorf("dtype %q is not supported (F32, BF16, F16)", e.DType)
	}
	if len(e.Shape) > maxTensorRank {
		return e, fmt.Errorf("shape %v has more than %d dimensions", e.Shape, maxTensorRank)
	}
	// The element count, overflow-checked: it may not need more bytes
	// than the file holds (a shape of [2^32, 2^32] would wrap to 0).
	n := int64(1)
	for _, d := range e.Shape {
		if d < 0 {
			return e, fmt.Errorf("negative dimension in shape %v", e.Shape)
		}
		if d > 0 && n > dataLen/w/int64(d) {
			return e, fmt.Errorf("shape %v needs more than the %d bytes of data the file holds", e.Shape, dataLen)
		}
		n *= int64(d)
	}
	begin, end := e.Offsets[0], e.Offsets[1]
	if begin < 0 || end < begin || end-begin != n*w {
		return e, fmt.Errorf("data_offsets [%d, %d] do not hold %s%v (%d bytes)", begin, end, e.DType, e.Shape, n*w)
	}
	if end > dataLen {
		return e, fmt.Errorf("data ends at byte %d but the file holds %d bytes of data (truncated?)", end, dataLen)
	}
	return e, nil
}

// Path is the file's path, as given to Open.
func (s *File) Path() string { return s.path }

// Size is the file's size in bytes.
func (s *File) Size() int64 { return s.size }

// DataStart is the byte offset in the file where the data begins, right
// after the header: an Entry's offsets count from there.
func (s *File) DataStart() int64 { return s.dataStart }

// Names returns the names of the file's tensors, sorted.
func (s *File) Names() []string { return slices.Sorted(maps.Keys(s.entries)) }

// Entry returns the header entry of tensor name.
func (s *File) Entry(name string) (Entry, bool) {
	e, ok := s.entries[name]
	return e, ok
}

// Close closes the file.
func (s *File) Close() error { return s.f.Close() }

// ReadInto reads tensor name into dst, converting from the stored dtype to
// dst's dtype (Float32 or BFloat16). dst's shape must already match. A
// tensor that holds NaN or ±Inf is read whole, then reported as a
// *NonFiniteError.
func (s *File) ReadInto(name string, dst *tensors.Tensor) error {
	e, ok := s.entries[name]
	if !ok {
		return fmt.Errorf("safetensors %s: no tensor %s", s.path, name)
	}
	sec := io.NewSectionReader(s.f, s.dataStart+e.Offsets[0], e.Offsets[1]-e.Offsets[0])
	var err error
	bad := nonFinite{}
	switch {
	case littleEndianHost && (e.DType == F32 && dst.DType() == dtypes.Float32 ||
		e.DType == BF16 && dst.DType() == dtypes.BFloat16):
		// Same dtype: read straight into the tensor's memory.
		if merr := dst.MutableBytes(func(data []byte) {
			if _, err = io.ReadFull(sec, data); err == nil {
				bad.scanStored(e.DType, data)
			}
		}); merr != nil {
			err = merr
		}
	case dst.DType() == dtypes.Float32:
		tensors.MustMutableFlatData(dst, func(out []float32) {
			if err = readConverted(sec, e.DType, out); err == nil {
				bad.scan(out, 0)
			}
		})
	case dst.DType() == dtypes.BFloat16:
		tensors.MustMutableFlatData(dst, func(out []bfloat16.BFloat16) {
			// Through float32 in chunks: F16 → F32 is exact, F32/F16 → BF16 rounds to nearest even.
			const chunk = 1 << 16
			buf := make([]float32, chunk)
			for start := 0; start < len(out) && err == nil; start += chunk {
				end := min(start+chunk, len(out))
				if err = readConverted(sec, e.DType, buf[:end-start]); err == nil {
					for i, x := range buf[:end-start] {
						out[start+i] = BF16FromFloat32(x)
					}
					bad.scanBF16(out[start:end], int64(start))
				}
			}
		})
	default:
		return fmt.Errorf("safetensors %s: tensor %s: cannot load %s into %s", s.path, name, e.DType, dst.DType())
	}
	if err != nil {
		return fmt.Errorf("safetensors %s: tensor %s: reading data: %w", s.path, name, err)
	}
	if bad.count > 0 {
		return &NonFiniteError{Path: s.path, Tensor: name, Count: bad.count, First: bad.first, Value: bad.value}
	}
	return nil
}

// NonFiniteError is a stored tensor holding NaN or ±Inf values: a
// checkpoint with one computes NaN logits, whose argmax is a fixed token,
// so a guard would "decide" without looking at its input.
type NonFiniteError struct {
	Path, Tensor string
	Count        int64   // non-finite elements
	First        int64   // index of the first one (row-major)
	Value        float32 // its value (NaN, +Inf or -Inf)
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("safetensors %s: tensor %s holds %d non-finite values (the first, element %d, is %v)",
		e.Path, e.Tensor, e.Count, e.First, e.Value)
}

// nonFinite counts the non-finite values of a tensor as it is read.
type nonFinite struct {
	count, first int64
	value        float32
}

func (b *nonFinite) add(i int64, v float32) {
	if b.count == 0 {
		b.first, b.value = i, v
	}
	b.count++
}

func (b *nonFinite) scan(xs []float32, offset int64) {
	for i, x := range xs {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			b.add(offset+int64(i), x)
		}
	}
}

func (b *nonFinite) scanBF16(xs []bfloat16.BFloat16, offset int64) {
	for i, x := range xs {
		if x.Bits()&0x7f80 == 0x7f80 { // exponent all ones: Inf or NaN
			b.add(offset+int64(i), x.Float32())
		}
	}
}

// scanStored scans stored data (F32 or BF16) that was read straight into a
// tensor's memory on a little-endian host, as machine words.
func (b *nonFinite) scanStored(dtype string, data []byte) {
	if len(data) == 0 {
		return
	}
	switch dtype {
	case F32:
		words := unsafe.Slice((*uint32)(unsafe.Pointer(&data[0])), len(data)/4)
		for i, bits := range words {
			if bits&0x7f800000 == 0x7f800000 {
				b.add(int64(i), math.Float32frombits(bits))
			}
		}
	case BF16:
		words := unsafe.Slice((*uint16)(unsafe.Pointer(&data[0])), len(data)/2)
		for i, bits := range words {
			if bits&0x7f80 == 0x7f80 {
				b.add(int64(i), math.Float32frombits(uint32(bits)<<16))
			}
		}
	}
}

// readConverted fills out with float32 values decoded from r, which holds
// len(out) elements of the storage dtype, in chunks of 64K elements.
func readConverted(r io.Reader, dtype string, out []float32) error {
	w := int(width[dtype])
	const chunk = 1 << 16
	buf := make([]byte, min(chunk, len(out))*w)
	for start := 0; start < len(out); start += chunk {
		n := min(chunk, len(out)-start)
		b := buf[:n*w]
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			switch dtype {
			case F32:
				out[start+i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			case BF16:
				out[start+i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			case F16:
				out[start+i] = f16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	}
	return nil
}
