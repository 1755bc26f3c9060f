//go:build !nofastkernels

package simplegofast

// GoMLX's internals, all of them in this one file: the functions of
// simplego reached with go:linkname (its executor table and the executors
// ours fall back to) and the unexported fields of its nodes read at their
// offsets. They are those of GoMLX v0.26.0, which go.mod pins.
//
//   - A changed signature or a renamed function fails the build (at link
//     time): build with -tags nofastkernels to run plain simplego without
//     any of this while the kernels are brought up to date.
//   - The fields' offsets are found by name with reflection once per type,
//     with their types checked; a read of a field that is not there, or of
//     another type, reports !ok and the op goes to simplego's own executor.
//   - checkGoMLX, run by Install and by TestGoMLXInternals, builds real
//     nodes with simplego's builder and reads their parameters back: a
//     layout that reads otherwise makes Install fail with an error naming
//     the GoMLX version found, and nothing is installed.
//
// docs/design.md#upgrading-gomlx says how to upgrade GoMLX.

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// writtenFor is the GoMLX version whose internals this file reads.
const writtenFor = "v0.26.0"

// gomlxVersion is the version of GoMLX built into this binary, as the
// build records it ("(unknown)" when it does not, e.g. in some tests).
func gomlxVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/gomlx/gomlx" {
				if m.Replace != nil {
					return m.Replace.Version + " (replaced)"
				}
				return m.Version
			}
		}
	}
	return "(unknown)"
}

// checkGoMLX checks that simplego's nodes read as this file expects: a
// DotGeneral, a Slice, a ReduceSum and a BroadcastInDim built with
// simplego's builder give back the parameters they were built with. The
// error names the GoMLX version found.
func checkGoMLX() error {
	if what := layoutMismatch(); what != "" {
		return fmt.Errorf("simplegofast: GoMLX %s: %s does not read as in GoMLX %s (its internals changed; build with -tags nofastkernels or set model.simplego_ops: true, and see docs/design.md#upgrading-gomlx)",
			gomlxVersion(), what, writtenFor)
	}
	return nil
}

// simplegoExecutor is the type of simplego's op executors.
type simplegoExecutor = func(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoSetNodeExecutor github.com/gomlx/gomlx/backends/simplego.setNodeExecutor
func simplegoSetNodeExecutor(op backends.OpType, priority int, fn simplegoExecutor)

//go:linkname simplegoExecDotGeneral github.com/gomlx/gomlx/backends/simplego.execDotGeneral
func simplegoExecDotGeneral(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecAdd github.com/gomlx/gomlx/backends/simplego.execAdd
func simplegoExecAdd(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecSub github.com/gomlx/gomlx/backends/simplego.execSub
func simplegoExecSub(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecMul github.com/gomlx/gomlx/backends/simplego.execMul
func simplegoExecMul(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecDiv github.com/gomlx/gomlx/backends/simplego.execDiv
func simplegoExecDiv(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecExp github.com/gomlx/gomlx/backends/simplego.execExp
func simplegoExecExp(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecLogistic github.com/gomlx/gomlx/backends/simplego.execLogistic
func simplegoExecLogistic(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecReduce github.com/gomlx/gomlx/backends/simplego.execReduce
func simplegoExecReduce(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecBroadcastInDim github.com/gomlx/gomlx/backends/simplego.execBroadcastInDim
func simplegoExecBroadcastInDim(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

//go:linkname simplegoExecSlice github.com/gomlx/gomlx/backends/simplego.execSlice
func simplegoExecSlice(backend *simplego.Backend, node *simplego.Node, inputs []*simplego.Buffer, inputsOwned []bool) (*simplego.Buffer, error)

// simplegoUserPriority is simplego's priority for user overrides.
const simplegoUserPriority = 100

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

// layoutMismatch builds nodes with simplego's builder and reads their
// parameters back; it returns what did not read as built ("" when all
// did).
func layoutMismatch() (what string) {
	defer func() {
		if r := recover(); r != nil {
			what = fmt.Sprintf("reading a node (panic: %v)", r)
		}
	}()
	b, err := simplego.New("")
	if err != nil {
		return fmt.Sprintf("the simplego backend (%v)", err)
	}
	defer b.Finalize()
	builder := b.Builder("fast_ops_check")
	param := func(name string, dims ...int) backends.Op {
		op, err := builder.Parameter(name, shapes.Make(dtypes.Float32, dims...), nil)
		if err != nil {
			panic(err)
		}
		return op
	}
	node := func(op backends.Op, err error) *simplego.Node {
		if err != nil {
			panic(err)
		}
		n, ok := op.(*simplego.Node)
		if !ok {
			panic(fmt.Sprintf("an op of type %T, not *simplego.Node", op))
		}
		return n
	}
	lhs, rhs := param("lhs", 2, 3, 5), param("rhs", 2, 7, 5)

	// DotGeneral returns a Reshape of the DotGeneral node: its input.
	dot := node(builder.DotGeneral(lhs, []int{2}, []int{0}, rhs, []int{2}, []int{0}))
	inputs, ok := nodeInputs(dot)
	if !ok || len(inputs) != 1 {
		return "a node's inputs"
	}
	p, ok := readSimpleGoDotParams(inputs[0])
	if !ok || p.batch != 2 || p.lhsCross != 3 || p.rhsCross != 7 || p.contracting != 5 ||
		fmt.Sprint(p.lhsContracting, p.lhsBatch, p.rhsContracting, p.rhsBatch) != "[2] [0] [2] [0]" {
		return "DotGeneral's parameters"
	}
	if dims, ok := nodeOutputDims(dot); !ok || !slices.Equal(dims, []int{2, 3, 7}) {
		return "a node's shape"
	}
	slice := node(builder.Slice(lhs, []int{0, 1, 2}, []int{2, 3, 5}, []int{1, 1, 1}))
	if starts, limits, strides, ok := sliceParams(slice); !ok ||
		fmt.Sprint(starts, limits, strides) != "[0 1 2] [2 3 5] [1 1 1]" {
		return "Slice's parameters"
	}
	sum := node(builder.ReduceSum(lhs, 1, 2))
	if axes, ok := nodeIntsData(sum); !ok || !slices.Equal(axes, []int{1, 2}) {
		return "ReduceSum's axes"
	}
	vec := param("vec", 7)
	bcast := node(builder.BroadcastInDim(vec, shapes.Make(dtypes.Float32, 3, 7), []int{1}))
	if axes, ok := nodeIntsData(bcast); !ok || !slices.Equal(axes, []int{1}) {
		return "BroadcastInDim's axes"
	}
	return ""
}
