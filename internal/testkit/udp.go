package testkit

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// UDPQueue is what the kernel holds for the IPv4 UDP sockets bound to
// addr (/proc/net/udp; Linux): the bytes queued in their receive buffers
// and the datagrams dropped with the buffers full. A test that fills a
// reader's buffer waits on these instead of sleeping.
func UDPQueue(t testing.TB, addr *net.UDPAddr) (queued, drops int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf(":%04X", addr.Port)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[1:] {
		// sl local rem st tx:rx tr tm->when retrnsmt uid timeout inode ref pointer drops
		f := strings.Fields(l)
		if len(f) < 13 || !strings.HasSuffix(f[1], local) {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		q, err1 := strconv.ParseInt(rx, 16, 64)
		d, err2 := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/net/udp line %q", l)
		}
		queued, drops = queued+q, drops+d
	}
	return queued, drops
}
