package central

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// streamMsgs starts a node on listen over dir and returns the messages of
// stream T (-1: no such stream), publishing one first when publish.
func streamMsgs(t *testing.T, cfg Config, publish bool) (int64, *Server) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if publish {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, "T")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return -1, s
	}
	if err != nil {
		t.Fatal(err)
	}
	return int64(st.CachedInfo().State.Msgs), s
}

// TestDataDirKeepsServerName (issue 11 case 5): a node restarted on the
// same data dir but another port keeps its streams (the name is kept in
// the data dir, not derived from the port again); another explicit name
// is refused rather than started empty.
func TestDataDirKeepsServerName(t *testing.T) {
	dir := t.TempDir()
	if n, s := streamMsgs(t, Config{Listen: freePort(t), DataDir: dir}, true); n != 1 {
		t.Fatalf("first start: %d messages", n)
	} else if got := s.StoreDir(); filepath.Dir(got) != dir {
		t.Fatalf("store dir %s not under %s", got, dir)
	}
	n, s := streamMsgs(t, Config{Listen: freePort(t), DataDir: dir}, false)
	if n != 1 {
		t.Fatalf("restarted on another port over the same data dir: stream T has %d messages (-1: missing), want 1: the node started empty", n)
	}
	first := s.Name()
	o, _ := New(Config{Listen: freePort(t), DataDir: dir, ServerName: "other"})
	defer o.Close()
	if err := o.Start(); !errors.Is(err, ErrServerName) {
		t.Fatalf("start as %q over %s's data: %v, want ErrServerName", "other", first, err)
	}
	if n, _ := streamMsgs(t, Config{Listen: freePort(t), DataDir: dir, ServerName: first}, false); n != 1 {
		t.Fatalf("explicit kept name: %d messages", n)
	}
}

// TestDataDirFromBeforeNameFile: a data dir written before the name was
// kept is found by its JetStream directory.
func TestDataDirFromBeforeNameFile(t *testing.T) {
	dir := t.TempDir()
	streamMsgs(t, Config{Listen: freePort(t), DataDir: dir}, true)
	if err := os.Remove(filepath.Join(dir, nameFile)); err != nil {
		t.Fatal(err)
	}
	if n, _ := streamMsgs(t, Config{Listen: freePort(t), DataDir: dir}, false); n != 1 {
		t.Fatalf("old data dir: %d messages, want 1", n)
	}
	if err := os.MkdirAll(filepath.Join(dir, "second", "jetstream"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, nameFile))
	s, _ := New(Config{Listen: freePort(t), DataDir: dir})
	defer s.Close()
	if err := s.Start(); !errors.Is(err, ErrServerName) {
		t.Fatalf("two servers' files and no name: %v, want ErrServerName", err)
	}
}
