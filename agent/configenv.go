package agent

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts the environment variables that override the
// configuration file: EDGE_AGENT_ and the key path in upper case with
// "_" for ".", as EDGE_AGENT_CENTRAL_URL for central.url. Precedence:
// flag > environment > file > default.
const EnvPrefix = "EDGE_AGENT_"

// envNotConfig are the EDGE_AGENT_ variables that are no configuration
// key: profiling a run (cmd/edge-agent).
var envNotConfig = map[string]bool{EnvPrefix + "CPUPROFILE": true}

// EnvKeys maps each environment variable to the key path it sets. Every
// key whose value is not a section is one: scalars, lists and maps take
// YAML (EDGE_AGENT_TELEMETRY_TOPICS='[drones/+/telemetry]').
func EnvKeys() map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if path != "" && (t.Kind() != reflect.Struct || t == durationT || reflect.PointerTo(t).Implements(unmarshalerT)) {
			out[EnvPrefix+strings.ToUpper(strings.ReplaceAll(path, ".", "_"))] = path
			return
		}
		for k, ft := range yamlKeys(t) {
			walk(ft, join(path, k))
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

// ApplyEnv sets the keys of the EDGE_AGENT_ variables of environ (as
// os.Environ) over c. An unknown variable is an error that names the
// closest one; a bad value names the variable, the key and the fix.
func (c *Config) ApplyEnv(environ []string) error {
	keys := EnvKeys()
	slices.Sort(environ)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || envNotConfig[name] {
			continue
		}
		path, ok := keys[name]
		if !ok {
			best, dist := "", 4
			for k := range keys {
				if d := editDistance(name, k); d < dist || d == dist && k < best {
					best, dist = k, d
				}
			}
			if best != "" {
				return fmt.Errorf("%w: environment %s: no such key; did you mean %s?", ErrConfig, name, best)
			}
			return fmt.Errorf("%w: environment %s: no such key (EDGE_AGENT_ and a key path such as CENTRAL_URL)", ErrConfig, name)
		}
		if err := c.setKey(path, value); err != nil {
			return fmt.Errorf("%w: environment %s: %w", ErrConfig, name, err)
		}
	}
	return nil
}

// setKey decodes value (YAML) into the key path of c, through the same
// checks as the file (a duration's unit, ...).
func (c *Config) setKey(path, value string) error {
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil || len(v.Content) == 0 {
		v = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}}}
	}
	node := v.Content[0]
	keys := strings.Split(path, ".")
	for i := len(keys) - 1; i >= 0; i-- {
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: keys[i]}, node}}
	}
	if err := checkNode(node, reflect.TypeFor[Config](), "", map[int]string{}); err != nil {
		return fmt.Errorf("%s", yamlLine.ReplaceAllString(err.Error(), "$2"))
	}
	if err := node.Decode(c); err != nil {
		return fmt.Errorf("%s: %q: %s", path, value, yamlLine.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), "$2"))
	}
	return nil
}
