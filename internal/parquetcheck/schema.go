package parquetcheck

import (
	"errors"
	"fmt"
	"strings"

	"github.com/parquet-go/parquet-go/format"
)

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
