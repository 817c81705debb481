package video

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns Prometheus collectors over Stats (read at scrape time).
func (in *Ingest) Collectors() []prometheus.Collector {
	return []prometheus.Collector{&collector{in: in}}
}

type collector struct{ in *Ingest }

var (
	descDatagrams = prometheus.NewDesc("edge_video_datagrams_total", "UDP datagrams read (RTP and RTCP sockets).", nil, nil)
	descBytes     = prometheus.NewDesc("edge_video_received_bytes_total", "UDP payload bytes read.", nil, nil)
	descDropped   = prometheus.NewDesc("edge_video_datagrams_dropped_total", "Datagrams dropped before reaching a drone, by reason.", []string{"reason"}, nil)
	descDrones    = prometheus.NewDesc("edge_video_drones", "Drones with an active video session.", nil, nil)
	descEvicted   = prometheus.NewDesc("edge_video_drones_evicted_total", "Idle discovered drones closed to give their slot to a newcomer.", nil, nil)
	descDrone     = map[string]*prometheus.Desc{}
)

// droneMetric names per-drone counters and how to read them.
var droneMetrics = []struct {
	name, help string
	get        func(DroneStats) uint64
}{
	{"edge_video_packets_total", "RTP packets routed to the drone.", func(s DroneStats) uint64 { return s.Packets }},
	{"edge_video_queue_drops_total", "Packets dropped on the drone's full queue.", func(s DroneStats) uint64 { return s.QueueDrops }},
	{"edge_video_lost_packets_total", "RTP sequence numbers declared lost.", func(s DroneStats) uint64 { return s.Lost }},
	{"edge_video_late_packets_total", "RTP packets arriving after their gap was given up.", func(s DroneStats) uint64 { return s.Late }},
	{"edge_video_duplicate_packets_total", "Duplicate RTP packets dropped.", func(s DroneStats) uint64 { return s.Duplicates }},
	{"edge_video_reordered_packets_total", "RTP packets put back in order.", func(s DroneStats) uint64 { return s.Reordered }},
	{"edge_video_malformed_total", "Malformed RTP packets or payloads.", func(s DroneStats) uint64 { return s.Malformed + s.MalformedPayload + s.MalformedRTCP }},
	{"edge_video_frames_total", "Frames appended in chunks.", func(s DroneStats) uint64 { return s.FramesOut }},
	{"edge_video_frames_dropped_total", "Frames dropped: incomplete, corrupt, too large, or skipped until a keyframe.", func(s DroneStats) uint64 {
		return s.FramesDropped + s.FramesSkipped + s.FramesTooLarge
	}},
	{"edge_video_chunks_total", "Chunks appended durably.", func(s DroneStats) uint64 { return s.Chunks }},
	{"edge_video_chunk_bytes_total", "Payload bytes of chunks appended.", func(s DroneStats) uint64 { return s.ChunkBytes }},
	{"edge_video_late_chunks_total", "Chunks flagged late.", func(s DroneStats) uint64 { return s.LateChunks }},
	{"edge_video_append_errors_total", "Chunks the store refused.", func(s DroneStats) uint64 { return s.AppendErrors }},
	{"edge_video_raw_packets_total", "Packets of unknown payload types stored raw.", func(s DroneStats) uint64 { return s.RawPackets }},
	{"edge_video_sender_reports_total", "RTCP sender reports used.", func(s DroneStats) uint64 { return s.SenderReports }},
	{"edge_video_clock_jumps_total", "RTP to wall-clock mapping jumps.", func(s DroneStats) uint64 { return s.ClockJumps }},
	{"edge_video_clock_skew_chunks_total", "Chunks whose time is outside the receiving clock's bounds (flagged clock-skew).", func(s DroneStats) uint64 { return s.ClockSkewChunks }},
	{"edge_video_sender_reports_skewed_total", "Sender reports ignored: NTP time outside the receiving clock's bounds while the mapping in use was within.", func(s DroneStats) uint64 { return s.SRSkewed }},
	{"edge_video_discontinuities_total", "Chunks flagged discontinuity.", func(s DroneStats) uint64 { return s.Discontinuities }},
}

func init() {
	for _, m := range droneMetrics {
		descDrone[m.name] = prometheus.NewDesc(m.name, m.help, []string{"drone"}, nil)
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDatagrams
	ch <- descBytes
	ch <- descDropped
	ch <- descDrones
	ch <- descEvicted
	for _, d := range descDrone {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.in.Stats()
	ch <- prometheus.MustNewConstMetric(descDatagrams, prometheus.CounterValue, float64(s.Datagrams))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.Bytes))
	for reason, v := range map[string]uint64{
		"not_rtp": s.NotRTP, "oversize": s.Oversize, "rejected": s.Rejected, "unverified": s.Unverified,
		"too_many_drones": s.TooManyDrones, "unknown_rtcp": s.UnknownRTCP, "kernel": s.KernelDrops,
	} {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(v), reason)
	}
	ch <- prometheus.MustNewConstMetric(descDrones, prometheus.GaugeValue, float64(s.Drones))
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(s.Evicted))
	for id, ds := range s.PerDrone {
		for _, m := range droneMetrics {
			ch <- prometheus.MustNewConstMetric(descDrone[m.name], prometheus.CounterValue, float64(m.get(ds)), id)
		}
	}
}
