package replicate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// A station's identity: what tells "the same ground station with a new
// disk" from "another station with the same agent id" (resume.go). It
// must survive a disk swap of the data directory, so it comes from the
// machine: systemd's machine id (/etc/machine-id, made at the first boot
// of an installed system; /var/lib/dbus/machine-id on older systems).
// The id itself is kept private, as systemd asks: the station identity
// is an application-specific hash of it (HMAC-SHA256 keyed with the
// machine id, as sd_id128_get_machine_app_specific derives one), 16
// bytes in hex.
//
// A cloned image that keeps its machine id makes every clone the same
// station: systemd's images leave /etc/machine-id empty so that each
// machine makes its own at first boot (systemd-machine-id-setup); an
// image that does not must have it regenerated.

// machineIDFiles are where the machine id is read, in order.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// stationApp is the application id the station identity is derived with.
const stationApp = "edge-agent station v1"

// MachineStation returns this machine's station identity, or an error
// naming what it read when the machine has no usable machine id (then
// the agent runs with an unknown station: a replaced disk or a restored
// backup waits for --takeover).
func MachineStation() (string, error) {
	var errs []string
	for _, f := range machineIDFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		id, err := stationFromMachineID(string(b))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		return id, nil
	}
	return "", fmt.Errorf("%w: %s", ErrNoStation, strings.Join(errs, "; "))
}

// stationFromMachineID derives the station identity from a machine id
// (32 hex digits, as /etc/machine-id holds it; surrounding space is
// ignored). An empty or all-zero id (an image's placeholder) is refused.
func stationFromMachineID(machineID string) (string, error) {
	s := strings.TrimSpace(machineID)
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != 16 {
		return "", fmt.Errorf("%w: want 32 hex digits, have %d characters", ErrNoStation, len(s))
	}
	zero := true
	for _, c := range raw {
		zero = zero && c == 0
	}
	if zero {
		return "", fmt.Errorf("%w: all zero (an image's placeholder)", ErrNoStation)
	}
	m := hmac.New(sha256.New, raw)
	m.Write([]byte(stationApp))
	return hex.EncodeToString(m.Sum(nil)[:16]), nil
}
