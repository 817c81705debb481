package sequence

import "errors"

// ErrConfig is returned by New for a Config it cannot use; the message
// names the field.
var ErrConfig = errors.New("sequence: bad config")
