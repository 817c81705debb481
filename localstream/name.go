package localstream

import (
	"fmt"
	"regexp"
)

var streamNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ValidateStreamName checks a stream name against ^[a-z][a-z0-9_-]{0,62}$.
func ValidateStreamName(name string) error {
	if !streamNameRE.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidStreamName, name, streamNameRE)
	}
	return nil
}
