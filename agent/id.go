package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var agentIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// agentIDFile is where a generated agent id is kept in the data directory.
const agentIDFile = "agent-id"

// ResolveAgentID returns configured when set; else the id kept in dataDir,
// generating and persisting one ("edge-" + 8 hex digits) on first start.
func ResolveAgentID(configured, dataDir string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	path := filepath.Join(dataDir, agentIDFile)
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if !agentIDRE.MatchString(id) {
			return "", fmt.Errorf("agent: %s holds an invalid agent id %q; fix or delete it", path, id)
		}
		return id, nil
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := "edge-" + hex.EncodeToString(r[:])
	if err := checkDataDir(dataDir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", fmt.Errorf("agent: data_dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("agent: persist agent id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("agent: persist agent id: %w", err)
	}
	return id, nil
}
