package live

import "errors"

// ErrConfig marks an invalid live lane configuration.
var ErrConfig = errors.New("live: invalid config")

// ErrNoLiveStream is returned by Read when the centre holds no live lane
// (no agent has sent a preview yet).
var ErrNoLiveStream = errors.New("live: no live stream at the centre")
