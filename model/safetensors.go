package model

// safetensors I/O. The format: an 8-byte little-endian header length N, N
// bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets":
// [begin, end]}, "__metadata__": {...}}, then the raw little-endian data;
// offsets are relative to the end of the header. Reading goes tensor by
// tensor straight from the file into the destination tensor (converting
// dtype in small chunks when needed), so a checkpoint is never held twice in
// memory.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
)

// Storage dtypes this package reads and writes.
const (
	stF32  = "F32"
	stBF16 = "BF16"
	stF16  = "F16"
)

// stWidth is the size in bytes of one element of each supported dtype.
var stWidth = map[string]int64{stF32: 4, stBF16: 2, stF16: 2}

// maxHeaderBytes bounds the JSON header (the format's reference
// implementation uses 100 MB).
const maxHeaderBytes = 100 << 20

// stEntry is one tensor of a safetensors header.
type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// stFile is an open safetensors file whose header has been checked.
type stFile struct {
	path      string
	f         *os.File
	dataStart int64
	entries   map[string]stEntry
}

// openSafetensors opens path and validates its header: length, JSON, dtypes,
// and that every tensor's byte range matches its shape and lies inside the
// file. Errors name the file (and the tensor).
func openSafetensors(path string) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := readSafetensorsHeader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return st, nil
}

func readSafetensorsHeader(path string, f *os.File) (*stFile, error) {
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
	st := &stFile{path: path, f: f, dataStart: 8 + int64(hlen), entries: map[string]stEntry{}}
	dataLen := size - st.dataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		var offsets struct {
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %s: bad header entry: %w", path, name, err)
		}
		if json.Unmarshal(msg, &offsets) != nil || len(offsets.Offsets) != 2 {
			return nil, fmt.Errorf("safetensors %s: tensor %s: data_offsets must be [begin, end]", path, name)
		}
		width, ok := stWidth[e.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors %s: tensor %s: dtype %q is not supported (F32, BF16, F16)", path, name, e.DType)
		}
		if len(e.Shape) > maxTensorRank {
			return nil, fmt.Errorf("safetensors %s: tensor %s: shape %v has more than %d dimensions", path, name, e.Shape, maxTensorRank)
		}
		// The element count, overflow-checked: it may not need more bytes
		// than the file holds (a shape of [2^32, 2^32] would wrap to 0).
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors %s: tensor %s: negative dimension in shape %v", path, name, e.Shape)
			}
			if d > 0 && n > dataLen/width/int64(d) {
				return nil, fmt.Errorf("safetensors %s: tensor %s: shape %v needs more than the %d bytes of data the file holds",
					path, name, e.Shape, dataLen)
			}
			n *= int64(d)
		}
		begin, end := e.Offsets[0], e.Offsets[1]
		if begin < 0 || end < begin || end-begin != n*width {
			return nil, fmt.Errorf("safetensors %s: tensor %s: data_offsets [%d, %d] do not hold %s%v (%d bytes)",
				path, name, begin, end, e.DType, e.Shape, n*width)
		}
		if end > dataLen {
			return nil, fmt.Errorf("safetensors %s: tensor %s: data ends at byte %d but the file holds %d bytes of data (truncated?)",
				path, name, end, dataLen)
		}
		st.entries[name] = e
	}
	if err := checkContiguous(st.entries, dataLen); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return st, nil
}

// maxTensorRank bounds the dimensions of a stored tensor.
const maxTensorRank = 8

func (s *stFile) Close() error { return s.f.Close() }

// readInto reads tensor name into dst, converting from the stored dtype to
// dst's dtype (Float32 or BFloat16). dst's shape must already match. A
// tensor that holds NaN or ±Inf is read whole, then reported as a
// *NonFiniteError.
func (s *stFile) readInto(name string, dst *tensors.Tensor) error {
	e, ok := s.entries[name]
	if !ok {
		return fmt.Errorf("safetensors %s: no tensor %s", s.path, name)
	}
	sec := io.NewSectionReader(s.f, s.dataStart+e.Offsets[0], e.Offsets[1]-e.Offsets[0])
	var err error
	bad := nonFinite{}
	switch {
	case littleEndianHost && (e.DType == stF32 && dst.DType() == dtypes.Float32 ||
		e.DType == stBF16 && dst.DType() == dtypes.BFloat16):
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
						out[start+i] = bf16FromFloat32(x)
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
	case stF32:
		words := unsafe.Slice((*uint32)(unsafe.Pointer(&data[0])), len(data)/4)
		for i, bits := range words {
			if bits&0x7f800000 == 0x7f800000 {
				b.add(int64(i), math.Float32frombits(bits))
			}
		}
	case stBF16:
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
	width := int(stWidth[dtype])
	const chunk = 1 << 16
	buf := make([]byte, min(chunk, len(out))*width)
	for start := 0; start < len(out); start += chunk {
		n := min(chunk, len(out)-start)
		b := buf[:n*width]
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			switch dtype {
			case stF32:
				out[start+i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			case stBF16:
				out[start+i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			case stF16:
				out[start+i] = f16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	}
	return nil
}

// bf16FromFloat32 rounds x to the nearest bfloat16, ties to even (NaN stays NaN).
func bf16FromFloat32(x float32) bfloat16.BFloat16 {
	bits := math.Float32bits(x)
	if x != x {
		return bfloat16.FromBits(uint16(bits>>16) | 0x40)
	}
	bits += 0x7FFF + (bits>>16)&1
	return bfloat16.FromBits(uint16(bits >> 16))
}

// f16ToFloat32 widens an IEEE half-precision value (exact).
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value = mant · 2⁻²⁴
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// f16FromFloat32 rounds x to the nearest IEEE half, ties to even.
func f16FromFloat32(x float32) uint16 {
	bits := math.Float32bits(x)
	sign := uint16(bits>>16) & 0x8000
	if x != x {
		return sign | 0x7e00
	}
	exp := int32(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	if exp >= 0x1f { // overflow (or inf)
		return sign | 0x7c00
	}
	if exp <= 0 { // subnormal or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is still correct
	}
	return sign | uint16(half)
}

// stTensor is a tensor to write: its name, storage dtype, shape, and the
// source tensor (Float32 or BFloat16) converted while writing.
type stTensor struct {
	name  string
	dtype string
	shape []int
	src   *tensors.Tensor
}

func (t stTensor) nbytes() int64 {
	n := stWidth[t.dtype]
	for _, d := range t.shape {
		n *= int64(d)
	}
	return n
}

// writeSafetensors writes ts to path through a temporary file in the same
// directory that is renamed into place once complete and synced.
func writeSafetensors(path string, ts []stTensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range ts {
		header[t.name] = stEntry{DType: t.dtype, Shape: t.shape, Offsets: [2]int64{off, off + t.nbytes()}}
		off += t.nbytes()
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors %s: header: %w", path, err)
	}
	for len(hb)%8 != 0 { // align the data to 8 bytes, as the Python writer does
		hb = append(hb, ' ')
	}
	out, err := atomicfile.Create(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hb)))
	w.Write(lenBuf[:])
	w.Write(hb)
	for _, t := range ts {
		if err := writeTensorData(w, t); err != nil {
			out.Abort()
			return fmt.Errorf("safetensors %s: tensor %s: %w", path, t.name, err)
		}
	}
	if err := w.Flush(); err != nil {
		out.Abort()
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return out.Commit()
}

// writeTensorData encodes t.src as t.dtype, little-endian.
func writeTensorData(w io.Writer, t stTensor) error {
	var err error
	buf := make([]byte, 0, 1<<16)
	flush := func() {
		if err == nil && len(buf) > 0 {
			_, err = w.Write(buf)
		}
		buf = buf[:0]
	}
	put := func(x float32) {
		switch t.dtype {
		case stF32:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		case stBF16:
			buf = binary.LittleEndian.AppendUint16(buf, bf16FromFloat32(x).Bits())
		case stF16:
			buf = binary.LittleEndian.AppendUint16(buf, f16FromFloat32(x))
		}
		if len(buf) >= cap(buf)-4 {
			flush()
		}
	}
	switch t.src.DType() {
	case dtypes.Float32:
		if t.dtype == stF32 && littleEndianHost {
			if cerr := t.src.ConstBytes(func(data []byte) { _, err = w.Write(data) }); cerr != nil {
				return cerr
			}
			return err
		}
		tensors.MustConstFlatData(t.src, func(flat []float32) {
			for _, x := range flat {
				put(x)
			}
		})
	case dtypes.BFloat16:
		if t.dtype == stBF16 && littleEndianHost {
			if cerr := t.src.ConstBytes(func(data []byte) { _, err = w.Write(data) }); cerr != nil {
				return cerr
			}
			return err
		}
		tensors.MustConstFlatData(t.src, func(flat []bfloat16.BFloat16) {
			for _, x := range flat {
				put(x.Float32())
			}
		})
	default:
		return fmt.Errorf("cannot write a %s tensor", t.src.DType())
	}
	flush()
	return err
}

// stIndex is model.safetensors.index.json.
type stIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// shardFileName is the Hugging Face name of shard i (0-based) of n.
func shardFileName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// planShards splits ts, in order, into shards of at most maxBytes each (a
// tensor larger than maxBytes gets a shard of its own). maxBytes <= 0 means
// one file.
func planShards(ts []stTensor, maxBytes int64) [][]stTensor {
	if maxBytes <= 0 {
		return [][]stTensor{ts}
	}
	var shards [][]stTensor
	var cur []stTensor
	var size int64
	for _, t := range ts {
		if len(cur) > 0 && size+t.nbytes() > maxBytes {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.nbytes()
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	return shards
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// littleEndianHost reports whether this machine stores numbers
// little-endian, as safetensors data is: only then may bytes be copied as
// they are.
var littleEndianHost = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()
