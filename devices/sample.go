package devices

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v3/cpu"
	"github.com/shirou/gopsutil/v3/disk"
	"github.com/shirou/gopsutil/v3/host"
	"github.com/shirou/gopsutil/v3/load"
	"github.com/shirou/gopsutil/v3/mem"
	"github.com/shirou/gopsutil/v3/net"
)

// SampleVersion is the version of the health sample's JSON layout.
const SampleVersion = 1

// Sample is one host health sample, the JSON payload of a health event
// (layout in the package doc). Fields a probe could not read stay zero
// and the failure is listed in Errors.
type Sample struct {
	// V is the layout version of the sample (SampleVersion).
	V     int       `json:"v"`
	Agent string    `json:"agent"`
	Time  time.Time `json:"time"`
	// TimeNs is when the sample was taken, Unix ns (Time as a number).
	TimeNs int64     `json:"time_ns"`
	CPU    CPUSample `json:"cpu"`
	Mem    MemSample `json:"mem"`
	Swap   MemSample `json:"swap"`
	Load   LoadAvg   `json:"load"`
	Disk   DiskUsage `json:"disk"`
	Net    []NetIO   `json:"net"`
	// Temperatures is empty on hosts without sensors (not an error).
	Temperatures []Temperature `json:"temperatures,omitempty"`
	// UptimeS is how long the host has been up, in seconds.
	UptimeS uint64   `json:"uptime_s"`
	Errors  []string `json:"errors,omitempty"`
}

// DecodeSample decodes a health event's payload (for central consumers and
// tools). It refuses a version other than SampleVersion.
func DecodeSample(b []byte) (Sample, error) {
	var s Sample
	if err := json.Unmarshal(b, &s); err != nil {
		return Sample{}, fmt.Errorf("%w: %w", ErrCorruptSample, err)
	}
	if s.V != SampleVersion {
		return Sample{}, fmt.Errorf("%w: version %d, this build reads %d", ErrCorruptSample, s.V, SampleVersion)
	}
	if s.Agent == "" {
		return Sample{}, fmt.Errorf("%w: no agent", ErrCorruptSample)
	}
	return s, nil
}

// CPUSample is the CPU busy percentage (all cores) since the previous sample.
type CPUSample struct {
	// Percent is the CPU busy percentage over all cores since the previous sample.
	Percent float64 `json:"percent"`
	// Count is the number of logical CPUs.
	Count int `json:"count"`
}

// MemSample is memory (or swap) use in bytes.
type MemSample struct {
	// Total is the memory's (or swap's) size in bytes.
	Total uint64 `json:"total"`
	// Available is the memory in bytes that can be given to programs without swapping (none for swap).
	Available uint64 `json:"available,omitempty"`
	// Used is the memory (or swap) in use, in bytes.
	Used uint64 `json:"used"`
	// UsedPercent is Used as a percentage of Total.
	UsedPercent float64 `json:"used_percent"`
}

// LoadAvg is the system load average.
type LoadAvg struct {
	// Load1, Load5 and Load15 are the load average over 1, 5 and 15
	// minutes: runnable and waiting tasks.
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
}

// DiskUsage is the usage of the filesystem holding the data directory.
type DiskUsage struct {
	Path string `json:"path"`
	// Total, Free and Used are the filesystem's size, free and used
	// bytes; UsedPercent is Used as a percentage of Total.
	Total       uint64  `json:"total"`
	Free        uint64  `json:"free"`
	Used        uint64  `json:"used"`
	UsedPercent float64 `json:"used_percent"`
	// InodesTotal and InodesFree are the filesystem's inodes, all and free.
	InodesTotal uint64 `json:"inodes_total"`
	InodesFree  uint64 `json:"inodes_free"`
}

// NetIO are one interface's cumulative counters.
type NetIO struct {
	Name        string `json:"name"`
	BytesSent   uint64 `json:"bytes_sent"`
	BytesRecv   uint64 `json:"bytes_recv"`
	PacketsSent uint64 `json:"packets_sent"`
	PacketsRecv uint64 `json:"packets_recv"`
	Errin       uint64 `json:"errin"`
	Errout      uint64 `json:"errout"`
	Dropin      uint64 `json:"dropin"`
	Dropout     uint64 `json:"dropout"`
}

// Temperature is one sensor's reading.
type Temperature struct {
	Sensor string `json:"sensor"`
	// Celsius is the sensor's temperature in degrees Celsius.
	Celsius float64 `json:"celsius"`
}

// probe reads the host with gopsutil. It keeps the previous CPU times to
// compute the busy percentage over the interval. Not safe for concurrent use.
type probe struct {
	dir        string
	interfaces map[string]bool // nil: every interface but loopback
	prevCPU    *cpu.TimesStat
}

// sample reads every probe; failures are listed, not fatal.
func (p *probe) sample(ctx context.Context, agent string, now time.Time) Sample {
	s := Sample{V: SampleVersion, Agent: agent, Time: now.UTC(), TimeNs: now.UnixNano()}
	fail := func(what string, err error) { s.Errors = append(s.Errors, fmt.Sprintf("%s: %v", what, err)) }

	if ts, err := cpu.TimesWithContext(ctx, false); err != nil || len(ts) == 0 {
		fail("cpu", err)
	} else {
		s.CPU.Percent = busyPercent(p.prevCPU, &ts[0])
		p.prevCPU = &ts[0]
	}
	if n, err := cpu.CountsWithContext(ctx, true); err == nil {
		s.CPU.Count = n
	}
	if m, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		fail("mem", err)
	} else {
		s.Mem = MemSample{Total: m.Total, Available: m.Available, Used: m.Used, UsedPercent: m.UsedPercent}
	}
	if m, err := mem.SwapMemoryWithContext(ctx); err == nil {
		s.Swap = MemSample{Total: m.Total, Used: m.Used, UsedPercent: m.UsedPercent}
	}
	if l, err := load.AvgWithContext(ctx); err != nil {
		fail("load", err)
	} else {
		s.Load = LoadAvg{l.Load1, l.Load5, l.Load15}
	}
	if u, err := disk.UsageWithContext(ctx, p.dir); err != nil {
		fail("disk", err)
	} else {
		s.Disk = DiskUsage{Path: p.dir, Total: u.Total, Free: u.Free, Used: u.Used, UsedPercent: u.UsedPercent,
			InodesTotal: u.InodesTotal, InodesFree: u.InodesFree}
	}
	if ns, err := net.IOCountersWithContext(ctx, true); err != nil {
		fail("net", err)
	} else {
		for _, n := range ns {
			if !p.wantInterface(n.Name) {
				continue
			}
			s.Net = append(s.Net, NetIO{Name: n.Name, BytesSent: n.BytesSent, BytesRecv: n.BytesRecv,
				PacketsSent: n.PacketsSent, PacketsRecv: n.PacketsRecv, Errin: n.Errin, Errout: n.Errout,
				Dropin: n.Dropin, Dropout: n.Dropout})
		}
	}
	// Temperatures: many hosts (VMs, containers) have none; gopsutil then
	// returns an empty list or a warning. Neither is a failure.
	if ts, _ := host.SensorsTemperaturesWithContext(ctx); len(ts) > 0 {
		for _, t := range ts {
			if t.Temperature > 0 {
				s.Temperatures = append(s.Temperatures, Temperature{Sensor: t.SensorKey, Celsius: t.Temperature})
			}
		}
	}
	if up, err := host.UptimeWithContext(ctx); err == nil {
		s.UptimeS = up
	}
	return s
}

func (p *probe) wantInterface(name string) bool {
	if p.interfaces != nil {
		return p.interfaces[name]
	}
	return name != "lo" && !strings.HasPrefix(name, "lo:")
}

// busyPercent is the non-idle share of CPU time between two readings (since
// boot when prev is nil).
func busyPercent(prev, cur *cpu.TimesStat) float64 {
	total := func(t *cpu.TimesStat) float64 {
		return t.User + t.System + t.Idle + t.Nice + t.Iowait + t.Irq + t.Softirq + t.Steal
	}
	idle := func(t *cpu.TimesStat) float64 { return t.Idle + t.Iowait }
	dt, di := total(cur), idle(cur)
	if prev != nil {
		dt -= total(prev)
		di -= idle(prev)
	}
	if dt <= 0 {
		return 0
	}
	return min(100, max(0, 100*(dt-di)/dt))
}
