package sequence

import "testing"

// BenchmarkObserve is the per-arrival cost in the two shapes the intakes
// use, on an in-order stream with a swap every 64 arrivals.
func BenchmarkObserve(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"mavlink", Config{Bits: 8, Window: 64, Tags: true}}, {"rtp", Config{Bits: 16, Window: 1024, MaxJump: 512, Probation: true}}} {
		b.Run(c.name, func(b *testing.B) {
			w := MustNew(c.cfg)
			var s uint32
			for i := 0; b.Loop(); i++ {
				if i%64 == 0 {
					w.Observe(s+1, s+1)
					w.Observe(s, s)
					s += 2
					continue
				}
				w.Observe(s, s)
				s++
			}
		})
	}
}

// TestNewRefuses: configs the window cannot use are refused, naming the field.
func TestNewRefuses(t *testing.T) {
	for _, c := range []Config{{Bits: 1, Window: 2}, {Bits: 33, Window: 2}, {Bits: 8, Window: 48}, {Bits: 8, Window: 256},
		{Bits: 8, Window: 1}, {Bits: 8, Window: 64, MaxJump: 193}, {Bits: 8, Window: 64, MaxJump: -1}} {
		if _, err := New(c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	if _, err := New(Config{Bits: 8, Window: 128, MaxJump: 128}); err != nil {
		t.Fatal(err)
	}
}
