package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/guardtest"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite rollout/testdata/prompts.golden")

// TestPromptsWithoutToolsAreUnchanged: the memory and judge prompts of a
// trajectory without tools — every turn of two windows, and the first step
// of an online session — are byte for byte (text and token ids) the
// prompts written to testdata/prompts.golden before trajectories could
// carry tools, so trained guards and their figures are unaffected.
func TestPromptsWithoutToolsAreUnchanged(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	g, err := NewGuard(DefaultConfig(), tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := guardtest.BankTrajectory()
	tr.Turns[1].User = str("also pay rent")
	var b strings.Builder
	record := func(name string, c *Call) {
		h := sha256.New()
		for _, id := range c.Prompt {
			binary.Write(h, binary.LittleEndian, int32(id))
		}
		fmt.Fprintf(&b, "=== %s: %d tokens, ids sha256 %x\n%s\n", name, len(c.Prompt), h.Sum(nil), tok.Decode(c.Prompt, false))
	}
	for _, w := range [][2]int{{0, 3}, {1, 3}} {
		v := g.view(&Episode{Traj: tr, Start: w[0], End: w[1]}, &Stats{})
		for turn := 0; turn < w[1]-w[0]; turn++ {
			record(fmt.Sprintf("window %v turn %d memory", w, turn), g.newCall(g.prompts.Memory("m", v.events(turn)), MemoryRole))
			record(fmt.Sprintf("window %v turn %d judge", w, turn), g.newCall(g.prompts.Judge("m", v.actions[w[0]+turn]), JudgeRole))
		}
	}
	in, err := g.PrepareStep(StepInput{UserPrompt: tr.UserPrompt, First: true, Action: tr.Turns[0].Action})
	if err != nil {
		t.Fatal(err)
	}
	record("first step memory", in.prepared.memory)
	path := filepath.Join("testdata", "prompts.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the prompts differ from %s (%d bytes, want %d)", path, len(got), len(want))
	}
}
