package central

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// nameFile keeps a standalone node's server name in its data dir.
// JetStream keeps its files under <data dir>/<server name>/jetstream, so a
// node started on the same data dir under another name (the default one
// derives from the port) would start empty, and every agent would then
// find the centre behind it. The name is fixed at the first start and a
// different one is refused.
const nameFile = "server-name"

// keptName returns the server name to use in dataDir: the kept one; else,
// for a data dir from before the name was kept, the one whose JetStream
// files are there; else want or def. It writes the name down. A want that
// differs from the data dir's name is refused with ErrServerName.
func keptName(dataDir, want, def string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, nameFile))
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(b))
		if kept == "" {
			return "", fmt.Errorf("%w: %s is empty: write the server name into it, or remove it", ErrServerName, filepath.Join(dataDir, nameFile))
		}
		if want != "" && want != kept {
			return "", fmt.Errorf("%w: data dir %s holds server %q, not %q: its streams would not be found; use --server-name %s, or another --data-dir", ErrServerName, dataDir, kept, want, kept)
		}
		return kept, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("central: read server name: %w", err)
	}
	found, err := jetStreamDirs(dataDir)
	if err != nil {
		return "", err
	}
	name := want
	switch {
	case want != "" && len(found) > 0 && !slices.Contains(found, want):
		return "", fmt.Errorf("%w: data dir %s holds JetStream files of server(s) %s, not %q: use --server-name %s, or another --data-dir", ErrServerName, dataDir, strings.Join(found, ", "), want, found[0])
	case want == "" && len(found) > 1:
		return "", fmt.Errorf("%w: data dir %s holds JetStream files of servers %s: choose one with --server-name", ErrServerName, dataDir, strings.Join(found, ", "))
	case want == "" && len(found) == 1:
		name = found[0]
	case want == "":
		name = def
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", fmt.Errorf("central: data dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, nameFile), []byte(name+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("central: keep server name: %w", err)
	}
	return name, nil
}

// jetStreamDirs lists the server names with JetStream files in dataDir.
func jetStreamDirs(dataDir string) ([]string, error) {
	ents, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("central: data dir: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if st, err := os.Stat(filepath.Join(dataDir, e.Name(), "jetstream")); err == nil && st.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
