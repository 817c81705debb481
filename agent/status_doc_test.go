package agent

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/devices"
)

// snake is the one JSON naming convention of /status.
var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestStatusDocumentNames: every field that /status can serve has an
// explicit snake_case JSON name (Go's default, the field name, is not).
func TestStatusDocumentNames(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Array || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty == reflect.TypeFor[time.Time]() {
			return
		}
		seen[ty] = true
		if ty.Implements(reflect.TypeFor[interface{ MarshalJSON() ([]byte, error) }]()) ||
			ty.Implements(reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()) {
			return // its own encoding
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				walk(f.Type, path)
				continue
			}
			if !snake.MatchString(name) {
				t.Errorf("%s.%s (%s): json name %q is not snake_case", path, f.Name, ty, name)
			}
			walk(f.Type, path+"."+name)
		}
	}
	walk(reflect.TypeFor[Status](), "status")
	walk(reflect.TypeFor[devices.Status](), "status.devices") // Status.Devices is `any`

}
