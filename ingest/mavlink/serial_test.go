package mavlink

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns a pseudo-terminal's master and its slave's path: the
// slave is a serial port as far as the intake can tell.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	return m, "/dev/pts/" + strconv.Itoa(n)
}

// TestSerial: frames written to a serial port (a pseudo-terminal's other
// end) are stored byte for byte, in order.
func TestSerial(t *testing.T) {
	master, dev := openPTY(t)
	_, st := openStore(t, t.TempDir())
	cfg := NewDefaultConfig()
	cfg.UDPListen = ""
	cfg.Serial = []SerialPort{{Device: dev, Baud: 115200}}
	in, _ := runIntake(t, cfg, st, nil)
	waitFor(t, 5*time.Second, "the port opened", func() bool { return in.Stats().Connections == 1 })
	w := newWriter(t, false, 11, 1, nil)
	var sent [][]byte
	for i := range 200 {
		f := w.frame(t, sampleMessages(i)[i%5])
		sent = append(sent, f)
		if _, err := master.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "serial frames stored", func() bool { return in.Stats().Stored == 200 })
	for i, r := range byDrone(t, st)["mavlink-11"] {
		if !bytes.Equal(r.Payload, sent[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}
