package flight

import (
	"bytes"
	"io"
	"slices"
	"strings"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func sortChannels(c []ChannelCount) {
	slices.SortFunc(c, func(a, b ChannelCount) int { return strings.Compare(a.Topic, b.Topic) })
}
