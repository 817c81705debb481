package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/edge-agent/edge-agent/agent"
)

// A configuration file states only what differs from the defaults; the
// rest comes from NewDefaultConfig, which the packages' own defaults make.
func ExampleLoadConfig() {
	dir, err := os.MkdirTemp("", "agent-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.yaml")
	doc := "agent_id: ground-7\ndata_dir: /srv/edge\nstore:\n  durability: periodic\ncentral:\n  url: nats://central:4222\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.AgentID, cfg.DataDir, cfg.Store.Durability, cfg.Central.URL)
	fmt.Println("defaults:", cfg.Store.SyncInterval, cfg.Store.QueueDepth, cfg.Watermark.IdleTimeout, cfg.Central.CommitInterval)
	// Output:
	// ground-7 /srv/edge periodic nats://central:4222
	// defaults: 1s 8192 30s 100ms
}

// An unknown key is an error that names it.
func ExampleLoadConfig_unknownKey() {
	dir, err := os.MkdirTemp("", "agent-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte("store:\n  durabilty: periodic\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	_, err = agent.LoadConfig(path)
	fmt.Println(errors.Is(err, agent.ErrConfig), strings.Contains(err.Error(), "line 2: store.durabilty: unknown key under store; did you mean store.durability?"))
	// Output: true true
}

// NewDefaultConfig is every default; a program sets what it needs.
func ExampleNewDefaultConfig() {
	cfg := agent.NewDefaultConfig()
	cfg.AgentID = "ground-7"
	cfg.Central.URL = "nats://central:4222"
	fmt.Println(cfg.Validate() == nil, cfg.Store.Durability, cfg.HTTP.Listen, cfg.Central.EffectiveLayout())
	// Output: true always 127.0.0.1:9464 2
}
