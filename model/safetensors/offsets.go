package safetensors

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// checkContiguous checks the byte ranges of a safetensors file's tensors
// as the format requires (and Hugging Face's loader enforces): taken in
// order, each tensor begins where the one before it ends — no overlap, no
// gap — from byte 0 of the data to its last byte (dataLen). Two tensors
// sharing bytes would load as one tensor's data read twice; a gap or a
// tail is data no tensor names. Errors name the tensors and the bytes.
func checkContiguous(entries map[string]Entry, dataLen int64) error {
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		ea, eb := entries[a].Offsets, entries[b].Offsets
		if ea[0] != eb[0] {
			return cmp.Compare(ea[0], eb[0])
		}
		if ea[1] != eb[1] {
			return cmp.Compare(ea[1], eb[1])
		}
		return strings.Compare(a, b)
	})
	end, last := int64(0), ""
	for _, name := range names {
		o := entries[name].Offsets
		switch {
		case o[0] < end:
			return fmt.Errorf("tensor %s (data bytes [%d, %d)) overlaps tensor %s, which ends at byte %d", name, o[0], o[1], last, end)
		case o[0] > end && last == "":
			return fmt.Errorf("tensor %s begins at data byte %d: the first tensor must begin at 0", name, o[0])
		case o[0] > end:
			return fmt.Errorf("tensor %s begins at data byte %d, not where tensor %s ends (%d): %d bytes belong to no tensor", name, o[0], last, end, o[0]-end)
		}
		end, last = o[1], name
	}
	if end != dataLen {
		return fmt.Errorf("the tensors' data ends at byte %d, but the file holds %d bytes of data: %d bytes belong to no tensor", end, dataLen, dataLen-end)
	}
	return nil
}
