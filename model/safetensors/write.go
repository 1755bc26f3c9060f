package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// Tensor is a tensor to write: its name, storage dtype (F32, BF16 or F16)
// and shape, and the source tensor (Float32 or BFloat16), converted while
// it is written.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Src   *tensors.Tensor
}

// Bytes is the size of the tensor's data in the file.
func (t Tensor) Bytes() int64 {
	n := width[t.DType]
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Write writes ts, in order, to path through a temporary file in the same
// directory that is renamed into place once complete and synced. metadata,
// when not empty, is the header's __metadata__.
func Write(path string, ts []Tensor, metadata map[string]string) error {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range ts {
		header[t.Name] = Entry{DType: t.DType, Shape: t.Shape, Offsets: [2]int64{off, off + t.Bytes()}}
		off += t.Bytes()
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
		if err := writeData(w, t); err != nil {
			out.Abort()
			return fmt.Errorf("safetensors %s: tensor %s: %w", path, t.Name, err)
		}
	}
	if err := w.Flush(); err != nil {
		out.Abort()
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return out.Commit()
}

// writeData encodes t.Src as t.DType, little-endian.
func writeData(w io.Writer, t Tensor) error {
	var err error
	buf := make([]byte, 0, 1<<16)
	flush := func() {
		if err == nil && len(buf) > 0 {
			_, err = w.Write(buf)
		}
		buf = buf[:0]
	}
	put := func(x float32) {
		switch t.DType {
		case F32:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		case BF16:
			buf = binary.LittleEndian.AppendUint16(buf, BF16FromFloat32(x).Bits())
		case F16:
			buf = binary.LittleEndian.AppendUint16(buf, f16FromFloat32(x))
		}
		if len(buf) >= cap(buf)-4 {
			flush()
		}
	}
	switch t.Src.DType() {
	case dtypes.Float32:
		if t.DType == F32 && littleEndianHost {
			if cerr := t.Src.ConstBytes(func(data []byte) { _, err = w.Write(data) }); cerr != nil {
				return cerr
			}
			return err
		}
		tensors.MustConstFlatData(t.Src, func(flat []float32) {
			for _, x := range flat {
				put(x)
			}
		})
	case dtypes.BFloat16:
		if t.DType == BF16 && littleEndianHost {
			if cerr := t.Src.ConstBytes(func(data []byte) { _, err = w.Write(data) }); cerr != nil {
				return cerr
			}
			return err
		}
		tensors.MustConstFlatData(t.Src, func(flat []bfloat16.BFloat16) {
			for _, x := range flat {
				put(x.Float32())
			}
		})
	default:
		return fmt.Errorf("cannot write a %s tensor", t.Src.DType())
	}
	flush()
	return err
}
