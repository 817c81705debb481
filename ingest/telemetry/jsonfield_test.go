package telemetry

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestObjectField(t *testing.T) {
	obj := []byte(` { "a" : 1, "s":"x\"}y", "n":{"t":[1,{"u":"}"}]}, "e\u0074":true ,"z":null}`)
	for key, want := range map[string]string{"a": "1", "s": `"x\"}y"`, "n": `{"t":[1,{"u":"}"}]}`, "et": "true", "z": "null"} {
		got, ok := objectField(obj, key)
		if !ok || string(got) != want {
			t.Errorf("%s: %q %v want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"t", "u", "b"} {
		if v, ok := objectField(obj, key); ok {
			t.Errorf("%s found: %q", key, v)
		}
	}
	if _, ok := objectField([]byte(`[1]`), "a"); ok {
		t.Error("array")
	}
}

// FuzzObjectField checks the scanner against encoding/json on valid objects.
func FuzzObjectField(f *testing.F) {
	f.Add([]byte(`{"timestamp":1,"x":{"a":[1,"]"]}}`), "timestamp")
	f.Add([]byte(`{"a\\b":2}`), `a\b`)
	f.Add([]byte(`{"a":1,"a":2}`), "a")
	f.Fuzz(func(t *testing.T, obj []byte, key string) {
		if !json.Valid(obj) {
			return
		}
		var m map[string]json.RawMessage
		isObj := json.Unmarshal(obj, &m) == nil
		got, ok := objectField(obj, key)
		if !isObj {
			if ok {
				t.Fatalf("found %q in a non-object", got)
			}
			return
		}
		want, has := m[key]
		if ok != has {
			t.Fatalf("key %q: found %v, encoding/json %v", key, ok, has)
		}
		if ok && !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
			t.Fatalf("key %q: %q want %q", key, got, want)
		}
	})
}
