package simplegofast

// Reading simplego's nodes. simplego keeps a node's output shape, its op's
// parameters (data) and its inputs in unexported fields, and the parameters
// of DotGeneral and Slice in unexported structs. Their offsets are found by
// name with reflection once per type (the types of GoMLX v0.26.0, which
// go.mod pins) and checked for the expected field types; each read is then a
// load at that offset, which the executors do for every op they run (a
// decoding step runs hundreds). A layout other than the expected one makes
// the readers report !ok, and the executors leave the op to simplego.

import (
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// nodeLayout is where simplego.Node keeps its shape, data and inputs.
type nodeLayout struct {
	shape, data, inputs uintptr
	ok                  bool
}

var simplegoNodeLayout = sync.OnceValue(func() (l nodeLayout) {
	t := reflect.TypeFor[simplego.Node]()
	shape, ok1 := t.FieldByName("shape")
	data, ok2 := t.FieldByName("data")
	inputs, ok3 := t.FieldByName("inputs")
	l.ok = ok1 && ok2 && ok3 && len(shape.Index) == 1 && len(data.Index) == 1 && len(inputs.Index) == 1 &&
		shape.Type == reflect.TypeFor[shapes.Shape]() &&
		data.Type.Kind() == reflect.Interface && data.Type.NumMethod() == 0 &&
		inputs.Type == reflect.TypeFor[[]*simplego.Node]()
	l.shape, l.data, l.inputs = shape.Offset, data.Offset, inputs.Offset
	return l
})

// nodeShape returns a node's output shape (shared with the node: not to be modified).
func nodeShape(node *simplego.Node) (shapes.Shape, bool) {
	l := simplegoNodeLayout()
	if !l.ok || node == nil {
		return shapes.Shape{}, false
	}
	return *(*shapes.Shape)(unsafe.Add(unsafe.Pointer(node), l.shape)), true
}

// nodeData returns a node's data: its op's parameters.
func nodeData(node *simplego.Node) (any, bool) {
	l := simplegoNodeLayout()
	if !l.ok || node == nil {
		return nil, false
	}
	return *(*any)(unsafe.Add(unsafe.Pointer(node), l.data)), true
}

// nodeInputs returns a node's inputs (shared with the node: not to be modified).
func nodeInputs(node *simplego.Node) ([]*simplego.Node, bool) {
	l := simplegoNodeLayout()
	if !l.ok || node == nil {
		return nil, false
	}
	return *(*[]*simplego.Node)(unsafe.Add(unsafe.Pointer(node), l.inputs)), true
}

// nodeOutputDims returns the dimensions of a float32 node's output (a copy);
// ok is false for other dtypes or layouts.
func nodeOutputDims(node *simplego.Node) (dims []int, ok bool) {
	s, ok := nodeShape(node)
	if !ok || s.DType != dtypes.Float32 {
		return nil, false
	}
	return append([]int(nil), s.Dimensions...), true
}

// nodeIntsData returns a node's data when it is an []int (the axes of
// reductions and broadcasts; shared with the node: not to be modified).
func nodeIntsData(node *simplego.Node) ([]int, bool) {
	data, ok := nodeData(node)
	if !ok {
		return nil, false
	}
	ints, ok := data.([]int)
	return ints, ok
}

// fieldKind is the type a struct field read by offset must have.
type fieldKind int

const (
	intsField fieldKind = iota // []int
	intField                   // int
)

// structFields are the offsets of named fields of the struct a data pointer points to.
type structFields struct {
	offsets []uintptr
	ok      bool
}

// dataFieldsCache maps (data type, field names) to their structFields.
var dataFieldsCache sync.Map

type dataFieldsKey struct {
	t     reflect.Type
	names string
}

// dataFields returns the offsets of the named fields (of the given kinds)
// of the struct data points to, and that pointer; ok is false when data is
// not a pointer to a struct with those fields.
func dataFields(data any, names []string, kinds []fieldKind) (ptr unsafe.Pointer, offsets []uintptr, ok bool) {
	t := reflect.TypeOf(data)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, nil, false
	}
	key := dataFieldsKey{t, names[0]}
	for _, n := range names[1:] {
		key.names += "," + n
	}
	f, found := dataFieldsCache.Load(key)
	if !found {
		f, _ = dataFieldsCache.LoadOrStore(key, findFields(t.Elem(), names, kinds))
	}
	fields := f.(structFields)
	if !fields.ok {
		return nil, nil, false
	}
	p := reflect.ValueOf(data).UnsafePointer()
	if p == nil {
		return nil, nil, false
	}
	return p, fields.offsets, true
}

// findFields looks the named fields of struct type t up and checks their types.
func findFields(t reflect.Type, names []string, kinds []fieldKind) structFields {
	want := map[fieldKind]reflect.Type{intsField: reflect.TypeFor[[]int](), intField: reflect.TypeFor[int]()}
	out := structFields{offsets: make([]uintptr, len(names)), ok: true}
	for i, n := range names {
		f, found := t.FieldByName(n)
		if !found || len(f.Index) != 1 || f.Type != want[kinds[i]] {
			return structFields{}
		}
		out.offsets[i] = f.Offset
	}
	return out
}

func intsAt(p unsafe.Pointer, off uintptr) []int { return *(*[]int)(unsafe.Add(p, off)) }
func intAt(p unsafe.Pointer, off uintptr) int    { return *(*int)(unsafe.Add(p, off)) }

// dotGeneralFields are the fields of simplego's DotGeneral parameters
// (v0.26: *dotGeneralNodeData) that readSimpleGoDotParams reads.
var (
	dotGeneralFields = []string{"lhsContractingAxes", "lhsBatchAxes", "rhsContractingAxes", "rhsBatchAxes",
		"batchSize", "lhsCrossSize", "rhsCrossSize", "contractingSize"}
	dotGeneralKinds = []fieldKind{intsField, intsField, intsField, intsField, intField, intField, intField, intField}
)

// readSimpleGoDotParams reads the parameters simplego keeps in the data of a
// DotGeneral node (the axes are shared with the node: not to be modified).
// ok is false when the layout is not the expected one (another GoMLX
// version): the caller then leaves the product to simplego.
func readSimpleGoDotParams(node *simplego.Node) (p dotParams, ok bool) {
	data, ok := nodeData(node)
	if !ok {
		return p, false
	}
	ptr, off, ok := dataFields(data, dotGeneralFields, dotGeneralKinds)
	if !ok {
		return p, false
	}
	p.lhsContracting, p.lhsBatch = intsAt(ptr, off[0]), intsAt(ptr, off[1])
	p.rhsContracting, p.rhsBatch = intsAt(ptr, off[2]), intsAt(ptr, off[3])
	p.batch, p.lhsCross, p.rhsCross, p.contracting = intAt(ptr, off[4]), intAt(ptr, off[5]), intAt(ptr, off[6]), intAt(ptr, off[7])
	return p, true
}

// sliceParams reads a Slice node's starts, limits and strides (simplego's
// *sliceNode in the node's data; shared with the node: not to be modified).
func sliceParams(node *simplego.Node) (starts, limits, strides []int, ok bool) {
	data, ok := nodeData(node)
	if !ok {
		return nil, nil, nil, false
	}
	ptr, off, ok := dataFields(data, []string{"starts", "limits", "strides"}, []fieldKind{intsField, intsField, intsField})
	if !ok {
		return nil, nil, nil, false
	}
	return intsAt(ptr, off[0]), intsAt(ptr, off[1]), intsAt(ptr, off[2]), true
}
