package e2e

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/centralread"
	"github.com/edge-agent/edge-agent/flight"
	"github.com/edge-agent/edge-agent/internal/testkit/flyrig"
)

// BenchmarkExportFlight: writing a flight's record (MCAP with zstd
// chunks, the certificate checked and signed) against a plain read of
// the same events — the three streams of the flight's agent read to the
// same commit with centralread, nothing done with them. Pairs alternate
// in one run; export_vs_read is the export's throughput over the read's
// (issue 39 asks ≥ 0.8); export_vs_read_cpu is the same by the process's
// CPU time (centre included), which a loaded machine disturbs less.
func BenchmarkExportFlight(b *testing.B) {
	f := flyrig.Fly(b, flyrig.Options{})
	nc := connectTB(b, f.Central.ClientURL())
	key := newKeyTB(b)
	ctx := context.Background()
	var fl flight.Flight
	if !waitTB(30*time.Second, func() bool {
		fls, err := flight.Find(ctx, nc, flight.FindOptions{Drone: testDrone})
		if err != nil || len(fls) == 0 {
			return false
		}
		fl = fls[0]
		return complete(nc, key)
	}) {
		b.Fatal("the flight did not complete")
	}
	f.Stop()
	o := flight.ExportOptions{FindOptions: flight.FindOptions{Drone: testDrone}, Key: key}
	var readNs, exportNs, readCPU, exportCPU time.Duration
	var bytes int64
	b.ResetTimer()
	for b.Loop() {
		st, c0 := time.Now(), cpuTime()
		for _, s := range []string{"telemetry", "video", "health"} {
			r, err := centralread.NewCentralReader(ctx, nc, s, centralread.ReadOptions{Agent: testAgent})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := r.Next(ctx); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			r.Close(ctx)
		}
		readNs += time.Since(st)
		readCPU += cpuTime() - c0
		st, c0 = time.Now(), cpuTime()
		res, err := flight.Export(ctx, nc, fl, o, io.Discard)
		if err != nil || res.Certificate.Status != flight.StatusComplete {
			b.Fatalf("export: %v %v", err, res.Certificate.Reasons)
		}
		exportNs += time.Since(st)
		exportCPU += cpuTime() - c0
		bytes = res.Bytes
	}
	b.ReportMetric(float64(readNs)/float64(exportNs), "export_vs_read")
	b.ReportMetric(float64(readCPU)/float64(exportCPU), "export_vs_read_cpu")
	b.ReportMetric(float64(bytes), "record_bytes")
	b.ReportMetric(float64(exportNs.Milliseconds())/float64(b.N), "export_ms")
	b.ReportMetric(float64(readNs.Milliseconds())/float64(b.N), "read_ms")
	b.ReportMetric(float64(readCPU.Microseconds())/1000/float64(b.N), "read_cpu_ms")
	b.ReportMetric(float64(exportCPU.Microseconds())/1000/float64(b.N), "export_cpu_ms")
}

// cpuTime is the process's CPU time (user + system): the centre runs in
// this process too, so a phase's CPU is the centre's and the reader's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
