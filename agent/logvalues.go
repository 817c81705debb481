package agent

import (
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"time"
)

// logValue is the HandlerOptions.ReplaceAttr of every logger of the
// agent and its commands (NewLogger): values are logged as values, not
// as Go's dump of their type. An address is its text ("127.0.0.1:5004",
// not {"IP":…,"Zone":""}); a nil error, pointer or address is left out
// (no <nil>, no null); a struct (an intake's Stats at stop) becomes a
// group of its non-zero fields, so a 60-counter struct of zeros is not
// 2 KB of noise.
func logValue(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	v := a.Value.Any()
	if isNil(v) {
		return slog.Attr{}
	}
	switch x := v.(type) {
	case net.Addr:
		return slog.String(a.Key, x.String())
	case error, fmt.Stringer, time.Time:
		return a
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Struct:
		attrs := structAttrs(rv)
		if len(attrs) == 0 {
			return slog.Attr{}
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(attrs...)}
	case reflect.Slice, reflect.Map:
		if rv.Len() == 0 {
			return slog.Attr{}
		}
	}
	return a
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// structAttrs are the non-zero exported fields of a struct, by their
// JSON names, nested structs as groups.
func structAttrs(rv reflect.Value) []slog.Attr {
	var out []slog.Attr
	t := rv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := rv.Field(i)
		if !f.IsExported() || fv.IsZero() {
			continue
		}
		name := fieldName(f)
		if tag := f.Tag.Get("json"); strings.HasPrefix(tag, "-") {
			continue
		}
		if a := logValue(nil, slog.Any(name, fv.Interface())); !a.Equal(slog.Attr{}) {
			if f.Anonymous && a.Value.Kind() == slog.KindGroup {
				out = append(out, a.Value.Group()...)
				continue
			}
			out = append(out, a)
		}
	}
	return out
}
