package devices

import (
	"errors"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParseThreshold(t *testing.T) {
	for in, want := range map[string]Threshold{
		"10%": {Percent: 10}, " 2.5 % ": {Percent: 2.5}, "1048576": {Bytes: 1 << 20}, "2GiB": {Bytes: 2 << 30},
		"512MB": {Bytes: 512e6}, "1.5g": {Bytes: 3 << 29}, "64 KiB": {Bytes: 64 << 10}, "0": {}, "7b": {Bytes: 7},
	} {
		got, err := ParseThreshold(in)
		if err != nil || got != want {
			t.Errorf("ParseThreshold(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "0%", "100%", "-1", "abc", "10XB", "NaN", "1e30TiB"} {
		if _, err := ParseThreshold(in); !errors.Is(err, ErrThreshold) {
			t.Errorf("ParseThreshold(%q): err %v", in, err)
		}
	}
	if got := (Threshold{Percent: 10}).Resolve(1000); got != 100 {
		t.Fatalf("Resolve = %d", got)
	}
	if got := (Threshold{Bytes: 7}).Resolve(1000); got != 7 {
		t.Fatalf("Resolve = %d", got)
	}
}

func TestThresholdYAML(t *testing.T) {
	var c struct {
		A Threshold `yaml:"a"`
		B Threshold `yaml:"b"`
	}
	if err := yaml.Unmarshal([]byte("a: 10%\nb: 2GiB\n"), &c); err != nil {
		t.Fatal(err)
	}
	if c.A != (Threshold{Percent: 10}) || c.B != (Threshold{Bytes: 2 << 30}) {
		t.Fatalf("%+v", c)
	}
	out, err := yaml.Marshal(c)
	if err != nil || string(out) != "a: 10%\nb: \"2147483648\"\n" {
		t.Fatalf("%q %v", out, err)
	}
	if err := yaml.Unmarshal([]byte("a: lots\n"), &c); !errors.Is(err, ErrThreshold) {
		t.Fatalf("bad threshold: %v", err)
	}
}

// FuzzParseThreshold: config text never panics, and what parses
// round-trips through its text form.
func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"10%", "2GiB", "512MB", "1048576", "1.5g", "0", "-1", "NaN%", "1e300", "99.999%", " 7 kib "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		th, err := ParseThreshold(s)
		if err != nil {
			if !errors.Is(err, ErrThreshold) {
				t.Fatalf("%q: unwrapped error %v", s, err)
			}
			return
		}
		if th.Bytes < 0 || th.Percent < 0 || th.Percent >= 100 {
			t.Fatalf("%q parsed to %+v", s, th)
		}
		back, err := ParseThreshold(th.String())
		if err != nil || back != th {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, th, th.String(), back, err)
		}
	})
}
