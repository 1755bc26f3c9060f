package dataset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// miniParquet writes the bundled training split as Parquet, byte for byte
// what `mageguard data subset data/agentdojo-mini/train.jsonl --out
// t.parquet` writes (the file of the reproductions in docs/reliability.md).
func miniParquet(t testing.TB) (string, []byte) {
	t.Helper()
	all, err := ReadAll("../data/agentdojo-mini/train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The defaults of `data subset`'s flags.
	trajs, err := Subset(all, SubsetOptions{MaxTurns: 12, MaxObservationChars: 2000, AttackPerSuite: 60, BenignPerSuite: 15, PositiveFrac: -1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "t.parquet")
	if err := WriteAll(p, trajs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, data
}

// writeFlipped writes data with byte i set to v, to path.
func writeFlipped(t testing.TB, path string, data []byte, i int, v byte) {
	t.Helper()
	b := append([]byte(nil), data...)
	b[i] = v
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptPageIndexOrCodecNeverCrashes: a byte of a column chunk's page
// index offset set to 0xff (which panicked with "slice bounds out of
// range") and a column chunk's codec changed from ZSTD to LZ4_RAW (whose
// decoder doubled its buffer until "fatal error: out of memory") give a
// result or an error naming the file, never a crash. The offsets are those
// fields' bytes in the test binary's file (with the tools and label_source
// columns), found by decoding the footer before and after the change.
func TestCorruptPageIndexOrCodecNeverCrashes(t *testing.T) {
	_, data := miniParquet(t)
	// A test binary's file is shorter than the binary's only in the
	// footer's last field (created_by names no build), after both bytes.
	const pageIndex, codec = 52462, 51561
	if len(data) < 52800 || data[codec] != 12 || data[pageIndex] != 251 {
		t.Fatalf("the writer's output changed (%d bytes, byte %d = %d, byte %d = %d): update the offsets", len(data), codec, data[codec], pageIndex, data[pageIndex])
	}
	p := filepath.Join(t.TempDir(), "flipped.parquet")

	writeFlipped(t, p, data, pageIndex, 0xff) // the page index is not read
	if ts, err := ReadAll(p); err != nil || len(ts) != 218 {
		t.Fatalf("page index damaged: %d trajectories, %v", len(ts), err)
	}

	writeFlipped(t, p, data, codec, 14)
	_, err := ReadAll(p)
	var e *Error
	if !errors.As(err, &e) || e.File != p || !strings.Contains(err.Error(), "LZ4_RAW data") {
		t.Fatalf("codec damaged: %v, want an error naming %s and the bad LZ4 data", err, p)
	}
}

// TestParquetColumnsAreReadWithTheirOwnTypes: a label column written as
// INT64 (2³², which was read as label 0), an optional column where the
// schema has a required one (nulls would read as ""), and an unknown column
// are refused, naming the column.
func TestParquetColumnsAreReadWithTheirOwnTypes(t *testing.T) {
	type turn64 struct {
		User        *string  `parquet:"user,optional"`
		Action      pqAction `parquet:"action"`
		Observation string   `parquet:"observation"`
		Label       int64    `parquet:"label"`
	}
	type row64 struct {
		ID              string   `parquet:"id"`
		Source          string   `parquet:"source"`
		Suite           string   `parquet:"suite"`
		UserTaskID      string   `parquet:"user_task_id"`
		InjectionTaskID *string  `parquet:"injection_task_id,optional"`
		AttackType      *string  `parquet:"attack_type,optional"`
		Model           string   `parquet:"model"`
		UserPrompt      string   `parquet:"user_prompt"`
		Turns           []turn64 `parquet:"turns,list"`
		Utility         *bool    `parquet:"utility,optional"`
		Security        *bool    `parquet:"security,optional"`
	}
	inj := "injection_task_0"
	p := writeRawParquet(t, []row64{{ID: "a", Source: "s", Suite: "b", UserTaskID: "u", InjectionTaskID: &inj, Model: "m",
		Turns: []turn64{{Action: pqAction{Name: "f", Arguments: `{}`}, Label: 1 << 32}}}})
	_, err := ReadAll(p)
	var e *Error
	if !errors.As(err, &e) || e.Field != "turns[].label" || !strings.Contains(err.Error(), "is INT64, want INT32") {
		t.Fatalf("INT64 label: %v", err)
	}

	type optionalID struct {
		ID              *string  `parquet:"id,optional"`
		Source          string   `parquet:"source"`
		Suite           string   `parquet:"suite"`
		UserTaskID      string   `parquet:"user_task_id"`
		InjectionTaskID *string  `parquet:"injection_task_id,optional"`
		AttackType      *string  `parquet:"attack_type,optional"`
		Model           string   `parquet:"model"`
		UserPrompt      string   `parquet:"user_prompt"`
		Turns           []pqTurn `parquet:"turns,list"`
		Utility         *bool    `parquet:"utility,optional"`
		Security        *bool    `parquet:"security,optional"`
	}
	p = writeRawParquet(t, []optionalID{{Source: "s", Suite: "b", UserTaskID: "u", Model: "m"}})
	if _, err := ReadAll(p); !errors.As(err, &e) || e.Field != "id" || !strings.Contains(err.Error(), "may hold nulls") {
		t.Fatalf("optional id: %v", err)
	}

	type extra struct {
		pqTrajectory
		Extra string `parquet:"extra"`
	}
	p = writeRawParquet(t, []extra{{pqTrajectory: pqTrajectory{ID: "a", Source: "s", Suite: "b", UserTaskID: "u", Model: "m"}}})
	if _, err := ReadAll(p); !errors.As(err, &e) || e.Field != "extra" || !strings.Contains(err.Error(), "unknown column") {
		t.Fatalf("unknown column: %v", err)
	}
}

// TestAnyFlippedByteOfAParquetFileIsHandled changes single bytes of the
// mini split's Parquet file — every byte of the footer and 200 spread over
// the column data, each to a value that depends on its position — and
// checks that every read ends cleanly (an *Error naming the file, or the
// very trajectories of the intact file: never other ones; a panic would
// fail the test), quickly and in bounded memory. scripts/parquet-flip.sh
// checks every byte with the binary, under ulimit.
func TestAnyFlippedByteOfAParquetFileIsHandled(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the file a few thousand times")
	}
	intact, data := miniParquet(t)
	want, err := ReadAll(intact)
	if err != nil {
		t.Fatal(err)
	}
	footerLen := int(uint32(data[len(data)-8]) | uint32(data[len(data)-7])<<8 | uint32(data[len(data)-6])<<16 | uint32(data[len(data)-5])<<24)
	footerStart := len(data) - 8 - footerLen
	var positions []int
	for i := 0; i < 4; i++ {
		positions = append(positions, i) // the header magic
	}
	step := footerStart / 200
	for i := 4 + step/2; i < footerStart; i += step {
		positions = append(positions, i)
	}
	for i := footerStart; i < len(data); i++ {
		positions = append(positions, i)
	}
	p := filepath.Join(t.TempDir(), "flipped.parquet")
	outcomes := map[string]int{}
	var ms runtime.MemStats
	for k, i := range positions {
		v := []byte{0xff, 0x00, data[i] ^ 0x01, data[i] ^ 0x80}[k%4]
		if v == data[i] {
			v ^= 0x40
		}
		writeFlipped(t, p, data, i, v)
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		start := time.Now()
		got, err := ReadAll(p)
		d := time.Since(start)
		runtime.ReadMemStats(&ms)
		where := fmt.Sprintf("byte %d set to 0x%02x (was 0x%02x)", i, v, data[i])
		var e *Error
		switch {
		case err == nil:
			outcomes["read"]++
			same := len(got) == len(want)
			for k := 0; same && k < len(got); k++ {
				same = Equal(got[k], want[k])
			}
			if !same {
				t.Errorf("%s: read without an error, but other trajectories", where)
			}
		case errors.As(err, &e) && e.File == p:
			outcomes["error"]++
		default:
			t.Errorf("%s: error %v does not name the file", where, err)
		}
		if d > 5*time.Second {
			t.Errorf("%s: took %s", where, d)
		}
		if alloc := ms.TotalAlloc - before; alloc > 512<<20 {
			t.Errorf("%s: allocated %d MB", where, alloc>>20)
		}
	}
	t.Logf("%d single-byte changes (%d of the %d-byte footer): %v", len(positions), footerLen, footerLen, outcomes)
}
