package replicate

import (
	"encoding/json"
	"testing"
)

// TestStateText: a state's JSON form is its name and reads back; an
// unknown name is refused.
func TestStateText(t *testing.T) {
	for s := StateStarting; s <= StateStopped; s++ {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil || back != s || string(b) != `"`+s.String()+`"` {
			t.Fatalf("%v: %s → %v, %v", s, b, back, err)
		}
	}
	var s State
	if err := json.Unmarshal([]byte(`"paused"`), &s); err == nil {
		t.Fatal("unknown state accepted")
	}
}
