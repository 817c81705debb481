package devices

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

func TestDecodeSample(t *testing.T) {
	in := Sample{V: SampleVersion, Agent: "gs-1", Time: time.Unix(5, 0).UTC(), TimeNs: 5e9, CPU: CPUSample{Percent: 1.5, Count: 2},
		Net: []NetIO{{Name: "eth0", BytesSent: 7}}, Temperatures: []Temperature{{Sensor: "cpu", Celsius: 40}}}
	b, _ := json.Marshal(in)
	out, err := DecodeSample(b)
	if err != nil || out.Agent != "gs-1" || out.TimeNs != 5e9 || out.Net[0].BytesSent != 7 || out.Temperatures[0].Celsius != 40 {
		t.Fatalf("%+v %v", out, err)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"v":2,"agent":"a"}`, `{"v":1}`, `{"v":"1","agent":"a"}`} {
		if _, err := DecodeSample([]byte(bad)); !errors.Is(err, ErrCorruptSample) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzDecodeSample(f *testing.F) {
	b, _ := json.Marshal(Sample{V: 1, Agent: "gs-1", Net: []NetIO{{Name: "eth0"}}})
	f.Add(b)
	f.Add([]byte(`{"v":1,"agent":"a","cpu":{"percent":1e400}}`))
	f.Add([]byte(`{"v":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSample(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptSample) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if s.V != SampleVersion || s.Agent == "" {
			t.Fatalf("accepted %+v", s)
		}
	})
}

func FuzzDecodeStoredMarker(f *testing.F) {
	b, _ := json.Marshal(storedMarker{Origin: localstream.Position{Segment: 1, Offset: 2}, RoutingKey: "d1",
		Writer: localstream.ShedWriter, Flags: localstream.FlagGap, ContentType: "application/json", Payload: []byte(`{"events":3}`)})
	f.Add(b)
	f.Add([]byte(`{"routing_key":"d","writer":"w","flags":0}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sm, err := decodeStoredMarker(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptMarker) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if sm.RoutingKey == "" || sm.Writer == "" || !sm.Flags.Has(localstream.FlagGap) {
			t.Fatalf("accepted %+v", sm)
		}
	})
}
