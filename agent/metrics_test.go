package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// served is a /metrics page parsed: each sample by its series
// (`name{label="value",...}`, as the page writes it) and the label names
// each metric name was seen with.
type served struct {
	samples map[string]float64
	labels  map[string][][]string
}

// parseMetrics reads the Prometheus text format the agent serves.
func parseMetrics(t *testing.T, text string) served {
	t.Helper()
	s := served{samples: map[string]float64{}, labels: map[string][][]string{}}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series, value := line[:i], line[i+1:]
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s.samples[series] = v
		name, rest, _ := strings.Cut(series, "{")
		var names []string
		for _, kv := range regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(rest, -1) {
			names = append(names, kv[1])
		}
		s.labels[name] = append(s.labels[name], names)
	}
	return s
}

// docMetric matches a metric name written in the README or docs/*.md, with
// the label names it is documented with (`edge_x_total{stream,writer}`).
// A name ending in "_" is a pattern (`edge_<part>_<field>`) and is skipped.
var docMetric = regexp.MustCompile("`(edge_[a-z0-9_]+)(?:\\{([a-z_,]+)\\})?")

// checkDocumentedMetrics fails for every metric name the README or
// docs/*.md mention that the running agent's /metrics does not serve, or
// serves without the documented labels: the docs name what a scrape gets.
func checkDocumentedMetrics(t *testing.T, page served) {
	t.Helper()
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The table of renamed metrics names old ones (its new ones are
		// checked by checkRenamesDocumented).
		text, _, _ := strings.Cut(string(b), "## Names changed")
		for _, m := range docMetric.FindAllStringSubmatch(text, -1) {
			name := m[1]
			if strings.HasSuffix(name, "_") {
				continue
			}
			n++
			seen, ok := page.labels[name]
			if !ok {
				t.Errorf("%s names %s: /metrics does not serve it", filepath.Base(f), name)
				continue
			}
			if m[2] == "" {
				continue
			}
			want := strings.Split(m[2], ",")
			if !slices.ContainsFunc(seen, func(got []string) bool {
				return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
			}) {
				t.Errorf("%s names %s{%s}: /metrics serves it with labels %v", filepath.Base(f), name, m[2], seen)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d metric names found in the docs: the pattern no longer matches them", n)
	}
}
