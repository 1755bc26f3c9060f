package parquetcheck

import (
	"errors"
	"fmt"
	"io"
)

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
