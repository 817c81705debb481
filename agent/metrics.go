package agent

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// statusCollector exposes the agent's status as Prometheus metrics at
// scrape time: every numeric field of every part's Stats becomes a metric
// named edge_<part>_<field> (snake case of the field or its JSON name),
// its help the field's doc comment (fieldHelp). uint64 fields are counters
// (suffix _total) unless they are levels (isLevel, gaugeFields); other
// numbers and booleans are gauges. Names are in base units (metricName):
// durations and Unix-ns times in seconds (_seconds, _timestamp_seconds),
// percentages as ratios, rates per second. Maps keyed by drone become a
// "drone" label; per-stream values carry a "stream" label.
// docs/metrics.md maps the names before issue 40 to these.
type statusCollector struct{ a *Agent }

// Describe sends nothing: the collector is unchecked, its metric set
// follows the parts that run.
func (c *statusCollector) Describe(chan<- *prometheus.Desc) {}

// Collect builds the metrics from a fresh Status.
func (c *statusCollector) Collect(out chan<- prometheus.Metric) {
	c.collect(&emitter{out: out, seen: map[string]bool{}})
}

func (c *statusCollector) collect(ch *emitter) {
	b := ReadBuild()
	ch.help("edge_agent_build_info", "Always 1: the labels name the running binary's version, commit (vcs.revision), whether its tree was modified, and Go release.",
		[]string{"version", "revision", "modified", "goversion"}, []string{b.Version, b.Revision, fmt.Sprint(b.Modified), b.GoVersion}, prometheus.GaugeValue, 1)
	s := c.a.Status()
	emitStruct(ch, "edge_store", nil, nil, reflect.ValueOf(s.Store))
	for _, st := range s.Streams {
		l, v := []string{"stream"}, []string{st.Name}
		emitStruct(ch, "edge_stream", l, v, reflect.ValueOf(st.Stats))
		emitStruct(ch, "edge_watermark_marks", l, v, reflect.ValueOf(st.Marks))
		if st.Replication != nil {
			emitStruct(ch, "edge_replication", l, v, reflect.ValueOf(*st.Replication))
		}
		if st.CatchUp != nil {
			emitStruct(ch, "edge_catch_up", l, v, reflect.ValueOf(*st.CatchUp))
		}
		ch.help("edge_stream_segments_open", "Segments of the stream open for appends (not sealed).", l, v, prometheus.GaugeValue, float64(countOpen(st)))
		for _, w := range st.ClockSkew {
			wl, wv := []string{"stream", "writer"}, []string{st.Name, w.Writer}
			ch.help("edge_watermark_clock_skew_ahead_events_total", "Events of the writer whose event time was ahead of the receiving clock by more than watermark.max_clock_skew.", wl, wv, prometheus.CounterValue, float64(w.Ahead))
			ch.help("edge_watermark_clock_skew_behind_events_total", "Events of the writer whose event time was behind the receiving clock by more than watermark.max_clock_behind.", wl, wv, prometheus.CounterValue, float64(w.Behind))
			behind := 0.0
			if w.IsBehind {
				behind = 1
			}
			ch.help("edge_watermark_writer_behind", "1 while the writer's clock is behind (it no longer holds the watermark back), else 0.", wl, wv, prometheus.GaugeValue, behind)
		}
		if st.LocalLagSeconds != nil {
			ch.help("edge_watermark_local_lag_seconds", "How far the local watermark's lower bound is behind the agent's clock.", l, v, prometheus.GaugeValue, *st.LocalLagSeconds)
			ch.help("edge_watermark_local_lower_timestamp_seconds", "The local watermark's lower bound: every durable event before it is in the store (Unix time).", l, v, prometheus.GaugeValue, float64(st.LocalWatermark.LowerNs)/1e9)
		}
		if st.CommittedLagSeconds != nil {
			ch.help("edge_watermark_committed_lag_seconds", "How far the committed watermark's lower bound (the last commit record's) is behind the agent's clock.", l, v, prometheus.GaugeValue, *st.CommittedLagSeconds)
			ch.help("edge_watermark_committed_lower_timestamp_seconds", "The committed watermark's lower bound: every event before it is at the centre (Unix time).", l, v, prometheus.GaugeValue, float64(st.CommittedWatermark.LowerNs)/1e9)
		}
	}
	if s.Video != nil {
		emitStruct(ch, "edge_video", nil, nil, reflect.ValueOf(*s.Video))
	}
	if s.Live != nil {
		ch.help("edge_live_share_bytes_per_second", "The live lane's share of the uplink cap.", nil, nil, prometheus.GaugeValue, float64(s.Live.ShareBytesPerSec))
		ch.help("edge_live_ensure_errors_total", "Failures to create or update the live lane's central streams.", nil, nil, prometheus.CounterValue, float64(s.Live.EnsureErrors))
		for _, ls := range s.Live.Streams {
			emitStruct(ch, "edge_live", []string{"stream"}, []string{ls.Stream}, reflect.ValueOf(ls))
		}
	}
	if s.Procs != nil {
		emitStruct(ch, "edge_procs", nil, nil, reflect.ValueOf(*s.Procs))
	}
	if s.Telemetry != nil {
		emitStruct(ch, "edge_telemetry", nil, nil, reflect.ValueOf(*s.Telemetry))
	}
	if s.MAVLink != nil {
		emitStruct(ch, "edge_mavlink", nil, nil, reflect.ValueOf(*s.MAVLink))
	}
	if s.Devices != nil {
		emitStruct(ch, "edge_devices", nil, nil, reflect.ValueOf(s.Devices))
	}
	ch.help("edge_errors", "Parts of the agent with a current error (listed in /status errors).", nil, nil, prometheus.GaugeValue, float64(len(s.Errors)))
}

func countOpen(st StreamStatus) int {
	n := 0
	for _, sg := range st.Segments {
		if !sg.Sealed {
			n++
		}
	}
	return n
}

// emitter sends each metric once: a name repeated by a nested Stats
// struct (an aggregate beside its parts) keeps its first value.
type emitter struct {
	out  chan<- prometheus.Metric
	seen map[string]bool
	// renamed, when not nil, records the name each field had before
	// issue 40's base units, by new name (docs/metrics.md).
	renamed map[string]string
}

// help sends one sample of a metric with its help text.
func (e *emitter) help(name, help string, labels, values []string, t prometheus.ValueType, v float64) {
	key := name + "\x00" + strings.Join(values, "\x00")
	if e.seen[key] {
		return
	}
	e.seen[key] = true
	e.out <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, labels, nil), t, v, values...)
}

var durationType = reflect.TypeFor[time.Duration]()

// emitStruct walks v (a struct, pointer or interface) and emits its numeric fields.
func emitStruct(ch *emitter, prefix string, labels, values []string, v reflect.Value) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := prefix
		if !f.Anonymous {
			name = prefix + "_" + fieldName(f)
		}
		emitValue(ch, name, fieldHelp[helpKey(t, f.Name)], labels, values, v.Field(i))
	}
}

// emitValue emits one field (help is its doc) or walks into it.
func emitValue(ch *emitter, name, help string, labels, values []string, fv reflect.Value) {
	if fv.Type() == durationType {
		name, _ = strings.CutSuffix(name, "_ns")
		ch.send(name+"_seconds", help, labels, values, prometheus.GaugeValue, time.Duration(fv.Int()).Seconds())
		return
	}
	switch fv.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		t := prometheus.CounterValue
		if isLevel(name) {
			t = prometheus.GaugeValue
		}
		ch.send(name, help, labels, values, t, float64(fv.Uint()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		ch.send(name, help, labels, values, prometheus.GaugeValue, float64(fv.Int()))
	case reflect.Float32, reflect.Float64:
		ch.send(name, help, labels, values, prometheus.GaugeValue, fv.Float())
	case reflect.Bool:
		b := 0.0
		if fv.Bool() {
			b = 1
		}
		ch.send(name, help, labels, values, prometheus.GaugeValue, b)
	case reflect.Struct, reflect.Pointer, reflect.Interface:
		emitStruct(ch, name, labels, values, fv)
	case reflect.Map:
		if fv.Type().Key().Kind() != reflect.String || len(labels) > 1 {
			return
		}
		label := "key"
		switch {
		case strings.Contains(name, "drop") || strings.Contains(name, "reason"):
			label = "reason"
		case strings.Contains(name, "drone"):
			label = "drone"
		}
		if slices.Contains(labels, label) {
			return
		}
		it := fv.MapRange()
		for it.Next() {
			emitValue(ch, name, help, append(slices.Clone(labels), label), append(slices.Clone(values), it.Key().String()), it.Value())
		}
	case reflect.Slice:
		// A list of drones (structs with an ID, or RTSP sources with a
		// Drone) becomes a "drone" label.
		et := fv.Type().Elem()
		if len(labels) > 0 || et.Kind() != reflect.Struct {
			return
		}
		key := "ID"
		if f, ok := et.FieldByName(key); !ok || f.Type.Kind() != reflect.String {
			if key = "Drone"; et.Field(0).Name != key || et.Field(0).Type.Kind() != reflect.String {
				return
			}
		}
		for i := range fv.Len() {
			el := fv.Index(i)
			emitStruct(ch, name, []string{"drone"}, []string{el.FieldByName(key).String()}, el)
		}
	}
}

// send emits a field's sample under its name in base units (metricName).
func (e *emitter) send(name, help string, labels, values []string, t prometheus.ValueType, v float64) {
	old := name
	if t == prometheus.CounterValue {
		old += "_total" // the old rule: every uint64 not a level
	}
	name, t, scale := metricName(name, t)
	if e.renamed != nil && old != name {
		e.renamed[name] = old
	}
	if help == "" {
		help = "See docs/metrics.md." // a field whose struct is not in fieldHelp (not reached from Status)
	}
	e.help(name, help, labels, values, t, v*scale)
}

// renamed are the fields whose generated name says nothing of the unit
// or the kind: host sizes in bytes, counts of things that go down.
var renamed = map[string]struct {
	name  string
	gauge bool
}{
	"edge_devices_health_mem_total":            {"edge_devices_health_mem_total_bytes", true},
	"edge_devices_health_mem_available":        {"edge_devices_health_mem_available_bytes", true},
	"edge_devices_health_mem_used":             {"edge_devices_health_mem_used_bytes", true},
	"edge_devices_health_swap_total":           {"edge_devices_health_swap_total_bytes", true},
	"edge_devices_health_swap_available":       {"edge_devices_health_swap_available_bytes", true},
	"edge_devices_health_swap_used":            {"edge_devices_health_swap_used_bytes", true},
	"edge_devices_health_disk_total":           {"edge_devices_health_disk_total_bytes", true},
	"edge_devices_health_disk_used":            {"edge_devices_health_disk_used_bytes", true},
	"edge_devices_health_disk_free":            {"edge_devices_health_disk_free_bytes", true},
	"edge_devices_health_disk_inodes_total":    {"edge_devices_health_disk_inodes", true},
	"edge_devices_health_disk_inodes_free":     {"edge_devices_health_disk_inodes_free", true},
	"edge_devices_health_uptime_s":             {"edge_devices_health_uptime_seconds", true},
	"edge_devices_health_cpu_count":            {"edge_devices_health_cpus", true},
	"edge_devices_health_v":                    {"edge_devices_health_sample_version", true},
	"edge_devices_health_time_ns":              {"edge_devices_health_sample_timestamp_seconds", true},
	"edge_video_socket_buffer":                 {"edge_video_socket_buffer_bytes", true},
	"edge_video_queue_drops":                   {"edge_video_queue_drops_total", false},
	"edge_replication_limits_max_payload":      {"edge_replication_limits_max_payload_bytes", true},
	"edge_replication_limits_max_control_line": {"edge_replication_limits_max_control_line_bytes", true},
}

// metricName is a field's metric name in base units and its kind: the
// renamed table; Unix-ns times in seconds (_timestamp_seconds);
// percentages as ratios (_ratio); metres spelled out; per-second rates spelled out; counters
// ending in _total, gauges not.
func metricName(name string, t prometheus.ValueType) (string, prometheus.ValueType, float64) {
	scale := 1.0
	if r, ok := renamed[name]; ok {
		if r.gauge {
			t = prometheus.GaugeValue
		} else {
			t = prometheus.CounterValue
		}
		name = r.name
		if strings.HasSuffix(name, "_timestamp_seconds") {
			scale = 1e-9
		}
	} else if base, ok := strings.CutSuffix(name, "_ns"); ok {
		name, scale = strings.TrimSuffix(strings.TrimSuffix(base, "_unix"), "_time")+"_timestamp_seconds", 1e-9
	} else if base, ok := strings.CutSuffix(name, "_percent"); ok {
		name, scale = base+"_ratio", 0.01
	} else if base, ok := strings.CutSuffix(name, "_pct"); ok {
		name, scale = base+"_ratio", 0.01
	} else if base, ok := strings.CutSuffix(name, "_m"); ok {
		name = base + "_meters"
	} else if base, ok := strings.CutSuffix(name, "_per_sec"); ok {
		name = base + "_per_second"
	}
	if t == prometheus.CounterValue && !strings.HasSuffix(name, "_total") {
		name += "_total"
	}
	return name, t, scale
}

// fieldName is the JSON name of a field, else its name in snake case.
func fieldName(f reflect.StructField) string {
	if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
		return tag
	}
	var b strings.Builder
	rs := []rune(f.Name)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// isLevel tells the uint64 fields that are levels, not counts since start.
func isLevel(name string) bool {
	for _, w := range []string{"backlog", "_last_", "queue", "free", "_length", "_len", "epoch_base", "sources_state"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// helpKey names a struct field in fieldHelp: package.Type.Field.
func helpKey(t reflect.Type, field string) string {
	return t.String() + "." + field
}
