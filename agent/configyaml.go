package agent

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decodeYAML decodes a configuration document over cfg. Its errors name
// the line, the key path (watermark.idle_timeout), the value and the
// fix: a duration without a unit says "write 30s", an unknown key names
// the known key it is closest to.
func decodeYAML(doc []byte, cfg *Config) error {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return syntaxError(err)
	}
	if len(root.Content) == 0 {
		return nil // an empty file: the defaults
	}
	lines := map[int]string{}
	if err := checkNode(root.Content[0], reflect.TypeFor[Config](), "", lines); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		// "line 9: cannot unmarshal !!str `x` into int": with the key.
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = m
			if n, rest, ok := lineOf(m); ok && lines[n] != "" && lines[n] != ambiguous {
				msgs[i] = fmt.Sprintf("line %d: %s: %s", n, lines[n], rest)
			}
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func lineOf(msg string) (int, string, bool) {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, "", false
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[2], true
}

// syntaxError names the line of a YAML syntax error. yaml.v3 reports
// the parser's errors (not the scanner's) with the line counted from 0,
// one line above the fault: they are the "did not find expected ..."
// ones.
func syntaxError(err error) error {
	n, msg, ok := lineOf(err.Error())
	if !ok {
		return fmt.Errorf("YAML syntax: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if strings.HasPrefix(msg, "did not find expected") {
		n++
	}
	return fmt.Errorf("line %d: YAML syntax: %s", n, msg)
}

var (
	durationT    = reflect.TypeFor[time.Duration]()
	unmarshalerT = reflect.TypeFor[yaml.Unmarshaler]()
)

// checkNode checks a YAML node against the Go type it decodes into:
// every key is known, every duration has a unit. lines receives the key
// path of each value's line.
func checkNode(n *yaml.Node, t reflect.Type, path string, lines map[int]string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode || reflect.PointerTo(t).Implements(unmarshalerT) {
		return nil
	}
	if path != "" {
		notePath(lines, n.Line, path)
	}
	switch {
	case t == durationT:
		return checkDuration(n, path)
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		keys := yamlKeys(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := keys[k.Value]
			if !ok {
				return unknownKey(k, path, keys)
			}
			notePath(lines, k.Line, join(path, k.Value))
			if err := checkNode(v, ft, join(path, k.Value), lines); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), lines); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			if err := checkNode(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), lines); err != nil {
				return err
			}
		}
	}
	return nil
}

// notePath notes the key path of a line: the deepest, or none
// (ambiguous) when the line holds several keys (a flow mapping).
func notePath(lines map[int]string, line int, path string) {
	cur, ok := lines[line]
	switch {
	case !ok || strings.HasPrefix(path, cur+".") || strings.HasPrefix(path, cur+"["):
		lines[line] = path
	case cur != path:
		lines[line] = ambiguous
	}
}

const ambiguous = "\x00"

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkDuration: a number without a unit is not a duration (yaml.v3
// would say "cannot unmarshal !!int `30` into time.Duration").
func checkDuration(n *yaml.Node, path string) error {
	if n.Kind != yaml.ScalarNode {
		return nil
	}
	if _, err := time.ParseDuration(n.Value); err == nil {
		return nil
	}
	if _, err := strconv.ParseFloat(n.Value, 64); err == nil {
		if n.Value == "-1" {
			return fmt.Errorf("line %d: %s: -1 is a number without a unit: write -1ns (disabled) or a duration such as 30s", n.Line, path)
		}
		return fmt.Errorf("line %d: %s: %s is a number without a unit: write %ss (or %sms, %sm: a duration)", n.Line, path, n.Value, n.Value, n.Value, n.Value)
	}
	return fmt.Errorf("line %d: %s: %q is not a duration: write one such as 30s, 500ms or 5m", n.Line, path, n.Value)
}

// unknownKey names the key, and the known key it is likely a typo of,
// else the keys there are.
func unknownKey(k *yaml.Node, path string, keys map[string]reflect.Type) error {
	where := "at the top level"
	if path != "" {
		where = "under " + path
	}
	known := make([]string, 0, len(keys))
	for name := range keys {
		known = append(known, name)
	}
	slices.Sort(known)
	best, dist := "", 3
	for _, name := range known {
		if d := editDistance(k.Value, name); d < dist || d == dist && best == "" && d <= len(name)/3 {
			best, dist = name, d
		}
	}
	if best != "" && dist <= max(2, len(best)/4) {
		return fmt.Errorf("line %d: %s: unknown key %s; did you mean %s?", k.Line, join(path, k.Value), where, join(path, best))
	}
	return fmt.Errorf("line %d: %s: unknown key %s; the keys there are %s", k.Line, join(path, k.Value), where, strings.Join(known, ", "))
}

// yamlKeys maps the YAML keys of a struct (its inline structs' too) to
// their types.
func yamlKeys(t reflect.Type) map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			for k, v := range yamlKeys(f.Type) {
				keys[k] = v
			}
		case name == "":
			keys[strings.ToLower(f.Name)] = f.Type
		default:
			keys[name] = f.Type
		}
	}
	return keys
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
