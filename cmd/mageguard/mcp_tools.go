package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/mcpgate"
)

// newMCPToolsCmd is `mageguard mcp tools`: the operator's view of the
// tool pins in a state directory (docs/mcp.md#tool-pinning).
func newMCPToolsCmd() *cobra.Command {
	var state, downstream, hash string
	var all bool
	cmd := &cobra.Command{
		Use:   "tools --state DIR (list | show TOOL | approve [--all] [TOOL[@HASH]...] [--hash HASH] | revoke TOOL...)",
		Short: "List, review, approve and revoke the pinned tool definitions of mcp's downstreams",
		Long: `tools reads and changes the tool pins of the state directory of a gateway
(STATE/pins/ID.json, one file per downstream): the tool definitions
approved, and the changed or new definitions the gateway saw and did not
approve (pending).

  list              every downstream's tools: pinned, changed (pending), new (pending)
  show TOOL         the pinned and the pending definition of a tool and their hashes, for review
  approve TOOL...   pin the pending definitions of these tools (--all: every pending one);
                    TOOL@sha256:HEX, or one TOOL with --hash sha256:HEX, approves only the
                    definition reviewed: refused when the pending one's hash is another
  revoke TOOL...    remove these tools' pins: calls to them are refused until approved again

A running gateway sees an approval at its next check of the tool (at once
for a call to it). With more than one downstream in the state, --downstream
ID names one (list shows the IDs). A pin file may be copied into a
repository, reviewed, and given to mcp as --tool-pins FILE.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if state == "" {
				return errors.New("mcp tools: --state DIR is required")
			}
			out := cmd.OutOrStdout()
			if args[0] == "list" {
				if len(args) > 1 {
					return fmt.Errorf("mcp tools list: unexpected arguments %q", args[1:])
				}
				return listPins(out, state)
			}
			path, err := pinFileOf(state, downstream)
			if err != nil {
				return err
			}
			names := args[1:]
			switch args[0] {
			case "show":
				if len(names) != 1 {
					return errors.New("mcp tools show: give one TOOL")
				}
				return showPin(out, path, names[0])
			case "approve":
				if len(names) == 0 && !all {
					return errors.New("mcp tools approve: give the TOOLs to approve, or --all")
				}
				if len(names) > 0 && all {
					return errors.New("mcp tools approve: give TOOLs or --all, not both")
				}
				if hash != "" {
					if len(names) != 1 || strings.Contains(names[0], "@") {
						return errors.New("mcp tools approve: --hash goes with one TOOL (several: TOOL@HASH each)")
					}
					names = []string{names[0] + "@" + hash}
				}
				approved, err := mcpgate.ApprovePins(path, names, time.Now())
				if err != nil {
					return fmt.Errorf("mcp tools approve: %w", err)
				}
				fmt.Fprintf(out, "approved: %s\n", strings.Join(approved, ", "))
				return nil
			case "revoke":
				if len(names) == 0 {
					return errors.New("mcp tools revoke: give the TOOLs to revoke")
				}
				if err := mcpgate.RevokePins(path, names); err != nil {
					return fmt.Errorf("mcp tools revoke: %w", err)
				}
				fmt.Fprintf(out, "revoked: %s\n", strings.Join(names, ", "))
				return nil
			}
			return fmt.Errorf("mcp tools: unknown action %q (list, show, approve, revoke)", args[0])
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "the gateway's state directory")
	cmd.Flags().StringVar(&downstream, "downstream", "", "the downstream's ID (list shows them; needed when the state has several)")
	cmd.Flags().BoolVar(&all, "all", false, "approve: every pending definition")
	cmd.Flags().StringVar(&hash, "hash", "", "approve: the hash of the pending definition reviewed (show prints it); refused when the pending definition is another")
	return cmd
}

// pinFileOf is the pin file of the downstream id in state (id "": the
// only one).
func pinFileOf(state, id string) (string, error) {
	paths, err := mcpgate.PinFiles(state)
	if err != nil {
		return "", err
	}
	if id != "" {
		path := filepath.Join(state, mcpgate.PinsDir, id+".json")
		if !slices.Contains(paths, path) {
			return "", fmt.Errorf("mcp tools: no downstream %q in %s (mcp tools list shows them)", id, state)
		}
		return path, nil
	}
	switch len(paths) {
	case 0:
		return "", fmt.Errorf("mcp tools: %s has no tool pins (a gateway pins a downstream's tools at its first listing)", state)
	case 1:
		return paths[0], nil
	}
	return "", fmt.Errorf("mcp tools: %s has %d downstreams: give --downstream ID (mcp tools list shows them)", state, len(paths))
}

// listPins prints every downstream's tools and their state.
func listPins(out io.Writer, state string) error {
	paths, err := mcpgate.PinFiles(state)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		fmt.Fprintf(out, "%s has no tool pins\n", state)
	}
	for _, path := range paths {
		f, err := mcpgate.ReadPinFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "downstream %s: %s\n", strings.TrimSuffix(filepath.Base(path), ".json"), f.Downstream)
		names := slices.Sorted(maps.Keys(f.Tools))
		for name := range f.Pending {
			if f.Tools[name] == nil {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			pin, pend := f.Tools[name], f.Pending[name]
			switch {
			case pend == nil:
				fmt.Fprintf(out, "  %-24s pinned        %s\n", name, short(pin.Hash))
			case pin == nil:
				fmt.Fprintf(out, "  %-24s new, pending  %s (seen %s)\n", name, short(pend.Hash), pend.Since.Format(time.RFC3339))
			default:
				fmt.Fprintf(out, "  %-24s changed       %s -> %s (%s; seen %s)\n", name, short(pin.Hash), short(pend.Hash),
					strings.Join(mcpgate.ChangedFields(pin.Definition, pend.Definition), ", "), pend.Since.Format(time.RFC3339))
			}
		}
	}
	return nil
}

// short is a hash's first 12 hex digits.
func short(hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	return h[:min(12, len(h))]
}

// showPin prints a tool's pinned and pending definitions.
func showPin(out io.Writer, path, name string) error {
	f, err := mcpgate.ReadPinFile(path)
	if err != nil {
		return err
	}
	pin, pend := f.Tools[name], f.Pending[name]
	if pin == nil && pend == nil {
		return fmt.Errorf("mcp tools show: no tool %q in %s", name, path)
	}
	for _, p := range []struct {
		what string
		pin  *mcpgate.Pin
	}{{"pinned", pin}, {"pending", pend}} {
		if p.pin == nil {
			continue
		}
		var buf bytes.Buffer
		json.Indent(&buf, p.pin.Definition, "", "  ")
		fmt.Fprintf(out, "%s %s (%s):\n%s\n", p.what, p.pin.Hash, p.pin.Since.Format(time.RFC3339), buf.String())
	}
	if pend != nil {
		fmt.Fprintf(out, "to approve this pending definition: mageguard mcp tools approve %s --hash %s\n", name, pend.Hash)
	}
	return nil
}
