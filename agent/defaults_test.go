package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/ingest/telemetry"
	"github.com/edge-agent/edge-agent/localstream"
	"github.com/edge-agent/edge-agent/watermark"
)

// The docs' "| field | default | meaning |" tables state the packages'
// defaults: each row's value is checked against the package's
// DefaultOptions/NewDefaultConfig (agent.example.yaml is checked against
// NewDefaultConfig, built from the same, by TestExampleIsDefaults).
func TestDocsTablesAreDefaults(t *testing.T) {
	for _, tc := range []struct {
		doc      string
		defaults any
		complete bool // every field of the type has a row
	}{
		{"localstream.md", localstream.DefaultOptions(), true},
		{"watermark.md", watermark.DefaultOptions(), true},
		{"telemetry.md", telemetry.NewDefaultConfig(), false},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			rows := defaultsTable(t, filepath.Join("..", "docs", tc.doc))
			v := reflect.ValueOf(tc.defaults)
			seen, checked := map[string]bool{}, 0
			for _, r := range rows {
				f := v.FieldByName(r.field)
				if !f.IsValid() {
					t.Errorf("%s: row %q names no field of %s", tc.doc, r.field, v.Type())
					continue
				}
				seen[r.field] = true
				ok, want := docValue(f, r.value)
				if !ok {
					continue
				}
				checked++
				if got := fieldText(f); got != want {
					t.Errorf("%s: %s is %s in the docs, %s in %s's defaults", tc.doc, r.field, r.value, got, v.Type())
				}
			}
			if checked < 3 {
				t.Fatalf("%s: only %d values checked: is the table there?", tc.doc, checked)
			}
			if tc.complete {
				for i := range v.NumField() {
					if n := v.Type().Field(i).Name; v.Type().Field(i).IsExported() && !seen[n] {
						t.Errorf("%s: no row for %s.%s", tc.doc, v.Type(), n)
					}
				}
			}
			t.Logf("%s: %d rows, %d values checked", tc.doc, len(rows), checked)
		})
	}
}

type defaultsRow struct{ field, value string }

var backticked = regexp.MustCompile("`([A-Za-z][A-Za-z0-9]*)`")

// defaultsTable reads the rows of path's "| field | default |" or
// "| knob | default |" table, one row per field named in the first
// column, its value the matching comma-separated part of the second.
func defaultsTable(t *testing.T, path string) []defaultsRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []defaultsRow
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		cols := strings.Split(line, "|")
		switch {
		case len(cols) < 4:
			in = false
		case strings.TrimSpace(cols[2]) == "default":
			in = true
		case in && !strings.HasPrefix(strings.TrimSpace(cols[1]), "---"):
			names := backticked.FindAllStringSubmatch(cols[1], -1)
			val := strings.TrimSpace(regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(cols[2], ""))
			vals := strings.Split(val, ", ")
			for i, n := range names {
				v := val
				if len(vals) == len(names) {
					v = vals[i]
				}
				rows = append(rows, defaultsRow{n[1], strings.TrimSpace(v)})
			}
		}
	}
	return rows
}

var sizeUnits = map[string]int64{"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

// docValue turns a table's value into the text fieldText gives for f;
// ok is false for what the table states in words (an injected function,
// a value derived at run time).
func docValue(f reflect.Value, s string) (ok bool, want string) {
	switch {
	case f.Kind() == reflect.Func || f.Kind() == reflect.Pointer || strings.Contains(s, "<"):
		return false, ""
	case s == "—":
		return true, fieldText(reflect.Zero(f.Type()))
	case f.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(strings.NewReplacer(" ", "", "min", "m").Replace(s))
		return err == nil, d.String()
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		num, unit, _ := strings.Cut(s, " ")
		n, err := strconv.ParseInt(num, 10, 64)
		m, known := sizeUnits[unit]
		return err == nil && known, strconv.FormatInt(n*m, 10)
	}
	s = strings.Trim(s, "`")
	if s == `""` {
		s = ""
	}
	return true, s
}

// fieldText is f as the tables write it: numbers in full, durations as
// time.Duration prints them, a list joined by ", ", a Stringer's string.
func fieldText(f reflect.Value) string {
	if s, ok := f.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if f.Kind() == reflect.Slice {
		var parts []string
		for i := range f.Len() {
			parts = append(parts, fieldText(f.Index(i)))
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprint(f.Interface())
}
