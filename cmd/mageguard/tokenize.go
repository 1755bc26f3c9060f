package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/model/tokenizer"
)

func newTokenizeCmd() *cobra.Command {
	var (
		path        string
		decode      bool
		untrusted   bool
		skipSpecial bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "Tokenizer check: JSON array of strings on stdin, JSON array of id arrays on stdout",
		Long: `tokenize reads a JSON array of strings on stdin and writes the token ids of each
string on stdout, as a JSON array of id arrays. No special tokens are added;
added tokens written in the text (<|im_start|>, <tool_call>, ...) become their
ids, as Hugging Face does by default. With --untrusted, the text is encoded as
untrusted (the path used for agent actions and observations): added-token text
becomes ordinary tokens and no added-token id can appear.

With --decode, it reads a JSON array of id arrays and writes a JSON array of
strings; an id that is no token of the tokenizer is an error naming its
place (array and element, from 0).

  echo '["Hello <|im_start|> world"]' | mageguard tokenize
  echo '[[9707, 220, 151644, 1879]]' | mageguard tokenize --decode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if decode && untrusted {
				return errors.New("tokenize: --untrusted applies to encoding, not to --decode")
			}
			in, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("tokenize: read stdin: %w", err)
			}
			var ids [][]int
			var texts []string
			if decode {
				err = unmarshalInput(in, &ids, "an array of arrays of token ids")
			} else {
				err = unmarshalInput(in, &texts, "an array of strings")
			}
			if err != nil {
				return err
			}
			tok, err := tokenizer.Load(path)
			if err != nil {
				return err
			}
			var items []any
			if decode {
				for i, seq := range ids {
					for j, id := range seq {
						if tok.IDToToken(id) == "" {
							return fmt.Errorf("tokenize --decode: stdin array %d element %d: %d is not a token id of %s (ids 0..%d)",
								i, j, id, path, tok.VocabSize()-1)
						}
					}
					items = append(items, tok.Decode(seq, skipSpecial))
				}
			} else {
				for _, text := range texts {
					if untrusted {
						items = append(items, tok.EncodeUntrusted(text))
					} else {
						items = append(items, tok.Encode(text))
					}
				}
			}
			return writeJSONLines(cmd.OutOrStdout(), items)
		},
	}
	cmd.Flags().StringVar(&path, "tokenizer", "assets/qwen3", "tokenizer.json, tokenizer.json.gz, or a directory holding one")
	cmd.Flags().BoolVar(&decode, "decode", false, "decode: JSON array of id arrays in, JSON array of strings out")
	cmd.Flags().BoolVar(&untrusted, "untrusted", false, "encode as untrusted text: never produce added-token ids")
	cmd.Flags().BoolVar(&skipSpecial, "skip-special", false, "with --decode, leave special tokens (<|im_start|>, ...) out")
	return cmd
}

// unmarshalInput decodes stdin's JSON into v; errors name the line and
// column of the problem.
func unmarshalInput(data []byte, v any, want string) error {
	err := json.Unmarshal(data, v)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return fmt.Errorf("tokenize: stdin %s: bad JSON: %v", position(data, syntax.Offset), err)
	case errors.As(err, &typ):
		return fmt.Errorf("tokenize: stdin %s: want %s, got a JSON %s", position(data, typ.Offset), want, typ.Value)
	}
	return fmt.Errorf("tokenize: stdin: %w", err)
}

// position returns "line L column C" of byte offset off in data (both from 1).
func position(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d column %d", line, col)
}

// writeJSONLines writes items as one JSON array, one item per line, without
// HTML escaping.
func writeJSONLines(w io.Writer, items []any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('[')
	for i, item := range items {
		if i > 0 {
			buf.WriteString(",\n")
		}
		if err := enc.Encode(item); err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	buf.WriteString("]\n")
	_, err := w.Write(buf.Bytes())
	return err
}
