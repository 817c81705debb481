package centralread

import "errors"

// ErrConfig: an invalid read, query or export request; the message names
// the field.
var ErrConfig = errors.New("centralread: invalid request")

// ErrSeveralAgents: a drone's video in an export without an agent comes
// from more than one agent; the message names them.
var ErrSeveralAgents = errors.New("centralread: several agents captured the drone")
