package central

import (
	"errors"
	"fmt"
	"net"
)

// Sentinel errors callers branch on; test with errors.Is.
var (
	// ErrConfig: the configuration is invalid; the message names the field.
	ErrConfig = errors.New("central: invalid config")
	// ErrNotReady: the server did not become ready (client port or JetStream) in time.
	ErrNotReady = errors.New("central: server not ready")
	// ErrServerName: the server name does not match the one kept in the
	// data dir (the node would start without its streams).
	ErrServerName = errors.New("central: server name does not match the data dir")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("central: server closed")
)

// ListenError: the client port cannot be bound (another server there?).
// It is an ErrNotReady; the caller names its own knob for the address.
type ListenError struct {
	// Addr is the HOST:PORT asked for.
	Addr string
	// Err is the bind error.
	Err error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("central: cannot listen on %s: %v (another server there?)", e.Addr, e.Reason())
}

// Reason is the bind error without the address (said once, in Addr).
func (e *ListenError) Reason() error {
	var oe *net.OpError
	if errors.As(e.Err, &oe) {
		return oe.Err
	}
	return e.Err
}

func (e *ListenError) Unwrap() error { return e.Err }

// Is makes a ListenError an ErrNotReady.
func (e *ListenError) Is(target error) bool { return target == ErrNotReady }
