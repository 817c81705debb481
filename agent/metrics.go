package agent

import (
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// statusCollector exposes the agent's status as Prometheus metrics at
// scrape time: every numeric field of every part's Stats becomes a metric
// named edge_<part>_<field> (snake case of the field or its JSON name).
// uint64 fields are counters (suffix _total); other numbers, booleans and
// durations (in seconds) are gauges. Maps keyed by drone become a "drone"
// label; per-stream values carry a "stream" label.
type statusCollector struct{ a *Agent }

// Describe sends nothing: the collector is unchecked, its metric set
// follows the parts that run.
func (c *statusCollector) Describe(chan<- *prometheus.Desc) {}

// Collect builds the metrics from a fresh Status.
func (c *statusCollector) Collect(out chan<- prometheus.Metric) {
	ch := &emitter{out: out, seen: map[string]bool{}}
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
		gauge(ch, "edge_stream_segments_open", l, v, float64(countOpen(st)))
		for _, w := range st.ClockSkew {
			wl, wv := []string{"stream", "writer"}, []string{st.Name, w.Writer}
			ch.send("edge_watermark_clock_skew_ahead_events_total", wl, wv, prometheus.CounterValue, float64(w.Ahead))
			ch.send("edge_watermark_clock_skew_behind_events_total", wl, wv, prometheus.CounterValue, float64(w.Behind))
			behind := 0.0
			if w.IsBehind {
				behind = 1
			}
			gauge(ch, "edge_watermark_writer_behind", wl, wv, behind)
		}
		if st.LocalLagSeconds != nil {
			gauge(ch, "edge_watermark_local_lag_seconds", l, v, *st.LocalLagSeconds)
			gauge(ch, "edge_watermark_local_lower_seconds", l, v, float64(st.LocalWatermark.LowerNs)/1e9)
		}
		if st.CommittedLagSeconds != nil {
			gauge(ch, "edge_watermark_committed_lag_seconds", l, v, *st.CommittedLagSeconds)
			gauge(ch, "edge_watermark_committed_lower_seconds", l, v, float64(st.CommittedWatermark.LowerNs)/1e9)
		}
	}
	if s.Video != nil {
		emitStruct(ch, "edge_video", nil, nil, reflect.ValueOf(*s.Video))
	}
	if s.Live != nil {
		gauge(ch, "edge_live_share_bytes_per_sec", nil, nil, float64(s.Live.ShareBytesPerSec))
		ch.send("edge_live_ensure_errors_total", nil, nil, prometheus.CounterValue, float64(s.Live.EnsureErrors))
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
	gauge(ch, "edge_errors", nil, nil, float64(len(s.Errors)))
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
}

func (e *emitter) send(name string, labels, values []string, t prometheus.ValueType, v float64) {
	key := name + "\x00" + strings.Join(values, "\x00")
	if e.seen[key] {
		return
	}
	e.seen[key] = true
	e.out <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, name, labels, nil), t, v, values...)
}

func gauge(ch *emitter, name string, labels, values []string, v float64) {
	ch.send(name, labels, values, prometheus.GaugeValue, v)
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
		emitValue(ch, name, labels, values, v.Field(i))
	}
}

func emitValue(ch *emitter, name string, labels, values []string, fv reflect.Value) {
	switch {
	case fv.Type() == durationType:
		gauge(ch, strings.TrimSuffix(name, "_ns")+"_seconds", labels, values, time.Duration(fv.Int()).Seconds())
		return
	}
	switch fv.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if isLevel(name) {
			gauge(ch, name, labels, values, float64(fv.Uint()))
			return
		}
		ch.send(name+"_total", labels, values, prometheus.CounterValue, float64(fv.Uint()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		gauge(ch, name, labels, values, float64(fv.Int()))
	case reflect.Float32, reflect.Float64:
		gauge(ch, name, labels, values, fv.Float())
	case reflect.Bool:
		b := 0.0
		if fv.Bool() {
			b = 1
		}
		gauge(ch, name, labels, values, b)
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
			emitValue(ch, name, append(slices.Clone(labels), label), append(slices.Clone(values), it.Key().String()), it.Value())
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
