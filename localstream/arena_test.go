package localstream

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestReadArenaRecordsIndependent: records decoded into one arena equal
// their fresh decodes, share their repeated strings, and stay independent:
// appending to one's payload or headers, or decoding more, changes no
// other record.
func TestReadArenaRecordsIndependent(t *testing.T) {
	var a readArena
	var encoded [][]byte
	var got []Event
	for i := range 3000 { // several payload and header chunks, string table restarts
		d := fmt.Sprintf("drone-%d", i%5)
		ev := Event{RoutingKey: d, Writer: "telemetry/" + d, EventTime: int64(i), ContentType: "application/json",
			Headers: []Header{{"mqtt-topic", "drones/" + d}, {"seq", fmt.Sprint(i)}},
			Payload: bytes.Repeat([]byte{byte(i)}, 1+i%300)}
		switch i % 11 {
		case 3:
			ev.Payload = bytes.Repeat([]byte{byte(i)}, arenaMaxPayload+1) // own allocation
		case 4:
			ev.Headers, ev.Payload = nil, nil
		case 5:
			ev.Writer = strings.Repeat("w", arenaMaxString+1) // not interned
		}
		b := appendRecord(nil, &ev)
		dec, ref, err := decodeRecordIn(b, &a)
		if err != nil || ref != nil {
			t.Fatal(err, ref)
		}
		encoded = append(encoded, b)
		got = append(got, dec)
	}
	// Mutate every record the way a careless caller might.
	for i := range got {
		got[i].Payload = append(got[i].Payload, 0xEE)
		got[i].Headers = append(got[i].Headers, Header{"added", "x"})
	}
	for i, b := range encoded {
		want, err := decodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		g := got[i]
		if len(want.Payload) > 0 || len(g.Payload) > 1 {
			g.Payload = g.Payload[:len(g.Payload)-1]
		} else {
			g.Payload = nil
		}
		g.Headers = g.Headers[:len(g.Headers)-1]
		if len(g.Headers) == 0 {
			g.Headers = nil
		}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("record %d changed by its neighbours: %+v, want %+v", i, g, want)
		}
	}
	if len(a.strs) > arenaMaxStrings {
		t.Fatalf("string table grew to %d > %d", len(a.strs), arenaMaxStrings)
	}
}
