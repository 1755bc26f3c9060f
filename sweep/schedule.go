package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// Files `sweep --plan` writes into the sweep's output folder (WriteSchedule).
const (
	PlanJSON  = "plan.json"
	PlanShell = "plan.sh"
)

// Point is one configuration of a sweep.
type Point struct {
	// Index numbers the points from 0 in the schedule's order.
	Index int `json:"index"`
	// Name is the point's folder name under the sweep's output folder, made
	// of its values with short key names, e.g. "gamma=0.25,lambda=0.5".
	Name string `json:"name"`
	// Values holds the YAML text of each swept key's value, in Schedule.Keys order.
	Values []string `json:"values"`
	// Sets are the point's `key=value` overrides, applied on top of the base config.
	Sets []string `json:"sets"`
	// ConfigHash identifies the point's fully resolved configuration
	// (ConfigHash of it; "" = not checked). The caller that resolves the
	// configurations sets it; DONE records it, and a finished point whose
	// hash differs is refused rather than reused (see Run).
	ConfigHash string `json:"config_sha256,omitempty"`
	// Command runs this point alone (only in plan.json, see WriteSchedule).
	Command []string `json:"command,omitempty"`
}

// Schedule is a sweep laid out: its swept keys and its points, in the
// order Run runs them. WriteSchedule writes it for a cluster.
type Schedule struct {
	// Keys are the swept config keys, in grid order.
	Keys []string `json:"keys"`
	// ShortKeys are the keys as they appear in folder names and tables: the
	// shortest dotted suffix that tells them apart ("gamma" for rewards.gamma).
	ShortKeys []string `json:"short_keys"`
	// BaseConfig is the config file each point starts from ("" = the sweep's own).
	BaseConfig string `json:"base_config"`
	// EvalData is the trajectory file each point is evaluated on ("" = the runner's choice).
	EvalData string `json:"eval_data"`
	// Heatmaps are the metrics drawn as heatmaps (Config.Heatmaps).
	Heatmaps []string `json:"heatmaps,omitempty"`
	// Dir is the working directory the points' commands run in (only in
	// plan.json, see WriteSchedule): relative paths resolve there.
	Dir string `json:"dir,omitempty"`
	// Points is the Cartesian product of the grid's values, the first key
	// varying slowest and the last fastest (like nested loops in key order).
	Points []Point `json:"points"`
}

// ConfigHash is the hex SHA-256 of a point's resolved configuration (e.g.
// its YAML), which tells whether a finished point ran with it.
func ConfigHash(resolved []byte) string {
	sum := sha256.Sum256(resolved)
	return hex.EncodeToString(sum[:])
}

// ResolveBaseConfig returns base (sweep.base_config) relative to the folder
// of the config file that names it, like a config file's `base:`; an
// absolute base, an empty one, or one without a config file is kept.
func ResolveBaseConfig(base, configFile string) string {
	if base == "" || configFile == "" || filepath.IsAbs(base) {
		return base
	}
	return filepath.Join(filepath.Dir(configFile), base)
}

// NewSchedule validates c and lays out its points.
func NewSchedule(c Config) (*Schedule, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sweep.%w", err)
	}
	p := &Schedule{BaseConfig: c.BaseConfig, EvalData: c.EvalData, Heatmaps: c.Heatmaps}
	for _, a := range c.Grid {
		p.Keys = append(p.Keys, a.Key)
	}
	p.ShortKeys = shortKeys(p.Keys)
	// Odometer over the value indices: the last key turns fastest.
	idx := make([]int, len(c.Grid))
	for {
		pt := Point{Index: len(p.Points)}
		var parts []string
		for i, a := range c.Grid {
			v := a.Values[idx[i]]
			pt.Values = append(pt.Values, v)
			pt.Sets = append(pt.Sets, a.Key+"="+v)
			parts = append(parts, safe(p.ShortKeys[i])+"="+safe(display(v)))
		}
		pt.Name = strings.Join(parts, ",")
		p.Points = append(p.Points, pt)
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(c.Grid[i].Values) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			break
		}
	}
	uniqueNames(p.Points)
	seen := map[string]int{}
	for _, pt := range p.Points {
		if j, dup := seen[pt.Name]; dup {
			return nil, fmt.Errorf("sweep.grid: points %d and %d both get the folder name %q", j, pt.Index, pt.Name)
		}
		seen[pt.Name] = pt.Index
	}
	return p, nil
}

// shortKeys gives each key its shortest dotted suffix that no other key ends with.
func shortKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		parts := strings.Split(k, ".")
		for n := 1; n <= len(parts); n++ {
			suffix := strings.Join(parts[len(parts)-n:], ".")
			clash := false
			for j, other := range keys {
				if j != i && (other == suffix || strings.HasSuffix(other, "."+suffix)) {
					clash = true
					break
				}
			}
			out[i] = suffix
			if !clash {
				break
			}
		}
	}
	return out
}

// safe keeps letters, digits and . _ + - and turns anything else into '_',
// so a name part is safe on every file system and in a shell word, and
// cannot contain the name's own separators '=' and ','.
func safe(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '+' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

// maxName bounds folder names well under file systems' 255-byte limit.
const maxName = 150

// uniqueNames shortens overlong names (keeping a hash of the whole name) and
// then makes names that still collide (values that differ only in unsafe
// characters) unique by appending "-p<index>".
func uniqueNames(pts []Point) {
	count := map[string]int{}
	for i := range pts {
		if n := pts[i].Name; len(n) > maxName {
			sum := sha256.Sum256([]byte(n))
			pts[i].Name = n[:maxName-9] + "-" + hex.EncodeToString(sum[:4])
		}
		count[pts[i].Name]++
	}
	for i := range pts {
		if count[pts[i].Name] > 1 {
			pts[i].Name += "-p" + strconv.Itoa(pts[i].Index)
		}
	}
}

// Point returns point n, or an error naming the valid range.
func (p *Schedule) Point(n int) (Point, error) {
	if n < 0 || n >= len(p.Points) {
		return Point{}, fmt.Errorf("sweep: no point %d: the plan has points 0..%d", n, len(p.Points)-1)
	}
	return p.Points[n], nil
}

// Label describes a point for people: "gamma=0.25, lambda=0.5".
func (p *Schedule) Label(pt Point) string {
	parts := make([]string, len(pt.Values))
	for i, v := range pt.Values {
		parts[i] = p.ShortKeys[i] + "=" + display(v)
	}
	return strings.Join(parts, ", ")
}

// WriteSchedule writes plan.json and plan.sh (`sweep --plan`) into outDir
// for running the points elsewhere (a Slurm array, a Kubernetes indexed job). command is the
// argument list that runs this sweep, e.g. {"/usr/local/bin/mageguard",
// "sweep", "--config", "/src/configs/sweep.yaml", "--out", "/src/runs/sweep"};
// point N's command is it followed by "--point N". Every command runs in
// workDir (an absolute path; plan.sh changes into it first), so that the
// relative paths inside the configuration resolve as they did where the
// schedule was written, wherever plan.sh is started from.
func WriteSchedule(outDir string, sched *Schedule, workDir string, command []string) error {
	if !filepath.IsAbs(workDir) {
		return fmt.Errorf("sweep: write plan: the working directory %q is not absolute", workDir)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("sweep: write plan: %w", err)
	}
	withCmd := *sched
	withCmd.Dir = workDir
	withCmd.Points = make([]Point, len(sched.Points))
	for i, pt := range sched.Points {
		pt.Command = append(append([]string{}, command...), "--point", strconv.Itoa(pt.Index))
		withCmd.Points[i] = pt
	}
	data, err := json.MarshalIndent(&withCmd, "", "  ")
	if err != nil {
		return fmt.Errorf("sweep: write plan: %w", err)
	}
	if err := atomicfile.WriteFileMode(filepath.Join(outDir, PlanJSON), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("sweep: write plan: %w", err)
	}
	self, err := filepath.Abs(filepath.Join(outDir, PlanShell))
	if err != nil {
		return fmt.Errorf("sweep: write plan: %w", err)
	}
	sh := scheduleShell(&withCmd, command, self)
	if err := atomicfile.WriteFileMode(filepath.Join(outDir, PlanShell), []byte(sh), 0o755); err != nil {
		return fmt.Errorf("sweep: write plan: %w", err)
	}
	return nil
}

// scheduleShell renders plan.sh (whose absolute path is self): `sh plan.sh N`
// runs point N in sched.Dir; N may also come from SLURM_ARRAY_TASK_ID or
// JOB_COMPLETION_INDEX.
func scheduleShell(sched *Schedule, command []string, self string) string {
	last := len(sched.Points) - 1
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "# mageguard sweep plan: %d points over %s (point N is folder <out>/<name>).\n",
		len(sched.Points), strings.Join(sched.Keys, " × "))
	b.WriteString("# It may be started from anywhere: it runs every command in the directory\n")
	b.WriteString("# the plan was made in (below), where the configs' relative paths resolve.\n")
	b.WriteString("#   one point:               sh plan.sh N\n")
	fmt.Fprintf(&b, "#   Slurm array job:         sbatch --array=0-%d --wrap 'sh %s $SLURM_ARRAY_TASK_ID'\n", last, shellQuote(self))
	fmt.Fprintf(&b, "#   Kubernetes indexed job:  completionMode: Indexed, completions: %d, command: sh %s\n", len(sched.Points), shellQuote(self))
	fmt.Fprintf(&b, "#   then the summary:        %s --collect\n", shellJoin(command))
	b.WriteString("set -e\n")
	fmt.Fprintf(&b, "cd %s\n", shellQuote(sched.Dir))
	b.WriteString("n=\"${1:-${SLURM_ARRAY_TASK_ID:-${JOB_COMPLETION_INDEX:-}}}\"\n")
	b.WriteString("case \"$n\" in\n")
	for _, pt := range sched.Points {
		fmt.Fprintf(&b, "%d) exec %s ;; # %s\n", pt.Index, shellJoin(pt.Command), pt.Name)
	}
	fmt.Fprintf(&b, "*) echo \"plan.sh: want a point number in 0..%d, got '$n'\" >&2; exit 2 ;;\n", last)
	b.WriteString("esac\n")
	return b.String()
}

// shellJoin quotes each argument for a POSIX shell where needed.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
