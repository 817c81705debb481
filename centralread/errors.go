package centralread

import "errors"

// ErrConfig: an invalid read, query or export request; the message names
// the field.
var ErrConfig = errors.New("centralread: invalid request")
