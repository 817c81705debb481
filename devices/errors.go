package devices

import "errors"

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrConfig: a configuration field is invalid; the message names the field and the fix.
	ErrConfig = errors.New("devices: invalid config")
	// ErrThreshold: a disk threshold ("2GiB", "10%", "536870912") cannot be parsed.
	ErrThreshold = errors.New("devices: invalid threshold")
	// ErrCorruptMarker: a recorded carried gap marker cannot be decoded.
	ErrCorruptMarker = errors.New("devices: corrupt recorded gap marker")
	// ErrCorruptSample: a health event's payload is not a health sample this build reads.
	ErrCorruptSample = errors.New("devices: corrupt health sample")
)
