package checkpoint

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TokenizerFileNames are the tokenizer files a checkpoint holds when
// present (ReadTokenizerFiles reads them, Write writes them).
var TokenizerFileNames = []string{"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
	"special_tokens_map.json", "added_tokens.json", "chat_template.jinja"}

// SettingsFile is the file of a checkpoint (whole or adapter) that holds
// the resolved mageguard configuration it was written with (YAML, paths
// absolute): eval, serve and mcp start from it when given the checkpoint
// without --config. Hugging Face and PEFT loaders ignore it.
const SettingsFile = "mageguard.yaml"

// TokenizerFiles are a tokenizer's files by name, as Write writes them
// (tokenizer.json plain, never gzip-compressed).
type TokenizerFiles map[string][]byte

// ReadTokenizerFiles reads the tokenizer files of dir
// (TokenizerFileNames: tokenizer.json, or tokenizer.json.gz uncompressed,
// and the others that are present); dir must hold a tokenizer.json.
func ReadTokenizerFiles(dir string) (TokenizerFiles, error) {
	files := TokenizerFiles{}
	for _, name := range TokenizerFileNames {
		src := filepath.Join(dir, name)
		data, err := os.ReadFile(src)
		if os.IsNotExist(err) {
			if data, err = readGzip(src + ".gz"); os.IsNotExist(err) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		files[name] = data
	}
	if files["tokenizer.json"] == nil {
		return nil, fmt.Errorf("tokenizer: %s has no tokenizer.json or tokenizer.json.gz", dir)
	}
	return files, nil
}

// readGzip returns the uncompressed contents of the gzip file path.
func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}
