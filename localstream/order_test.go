package localstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestOrderAcrossRandomScales appends from concurrent writers (one key
// each, sequence numbers in the payload) while random splits and merges
// run, and reads concurrently from the head: every key comes out
// complete and in order, from the live reader and from a reread.
func TestOrderAcrossRandomScales(t *testing.T) {
	seed := testkit.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "telemetry", 2)
	const writers, perWriter = 12, 400
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	head := st.HeadCut()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				p := binary.BigEndian.AppendUint64(nil, uint64(i))
				if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprintf("drone-%d", w), Writer: "w", Payload: p}); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		})
	}
	live := make(chan map[string][]uint64, 1)
	go func() {
		r, err := st.NewReader(head, nil)
		if err != nil {
			t.Error(err)
			live <- nil
			return
		}
		got := map[string][]uint64{}
		for n := 0; n < writers*perWriter; n++ {
			rec, err := r.Next(ctx)
			if err != nil {
				t.Errorf("live read after %d: %v", n, err)
				break
			}
			got[rec.RoutingKey] = append(got[rec.RoutingKey], binary.BigEndian.Uint64(rec.Payload))
		}
		live <- got
	}()
	scaleDone := make(chan int)
	go func() {
		scales := 0
		for ctx.Err() == nil && scales < 30 {
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
			open := st.Topology().Open()
			if len(open) > 1 && (len(open) > 6 || rng.IntN(2) == 0) {
				i := rng.IntN(len(open) - 1)
				if _, err := st.Merge(open[i].ID, open[i+1].ID); err != nil {
					t.Errorf("merge: %v", err)
				}
			} else if _, err := st.Split(open[rng.IntN(len(open))].ID, 2+rng.IntN(2)); err != nil {
				t.Errorf("split: %v", err)
			}
			scales++
		}
		scaleDone <- scales
	}()
	wg.Wait()
	cancel2 := <-scaleDone
	t.Logf("%d scales, %d segments", cancel2, len(st.Topology().Segments))
	check := func(what string, got map[string][]uint64) {
		for w := range writers {
			seq := got[fmt.Sprintf("drone-%d", w)]
			if len(seq) != perWriter {
				t.Fatalf("%s: drone-%d has %d events, want %d", what, w, len(seq), perWriter)
			}
			for i, v := range seq {
				if v != uint64(i) {
					t.Fatalf("%s: drone-%d event %d has seq %d", what, w, i, v)
				}
			}
		}
	}
	check("live reader", <-live)
	reread := map[string][]uint64{}
	for _, rec := range readAll(t, st) {
		reread[rec.RoutingKey] = append(reread[rec.RoutingKey], binary.BigEndian.Uint64(rec.Payload))
	}
	check("reread", reread)
	if st.Stats().Scales < 10 {
		t.Fatalf("only %d scales happened", st.Stats().Scales)
	}
}

// TestReaderBetweenCuts reads from a mid cut to a later cut across a split.
func TestReaderBetweenCuts(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	st := mustStream(t, s, "video", 1)
	ctx := context.Background()
	app := func(n int) {
		for i := range n {
			if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprint("k", i%4), Writer: "w"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	app(10)
	mid := st.TailCut()
	if _, err := st.Split(0, 2); err != nil {
		t.Fatal(err)
	}
	app(10)
	end := st.TailCut()
	app(10)
	r, err := st.NewReader(mid, &end)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := r.TryNext()
		if errors.Is(err, ErrEndOfCut) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 10 {
		t.Fatalf("read %d between cuts, want 10", n)
	}
	if !r.Cut().Equal(end) {
		t.Fatalf("reader stopped at %v, want %v", r.Cut(), end)
	}
	if _, err := st.NewReader(end, &mid); !errors.Is(err, ErrForeignCut) {
		t.Fatalf("from after to: %v", err)
	}
}

func TestAutoScaleByEventRate(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openStore(t, t.TempDir(), Options{Now: clock})
	st, err := s.CreateStream("telemetry", StreamConfig{Scaling: ScalingPolicy{Type: ScaleByEventRate, TargetRate: 10,
		Window: time.Second, Cooldown: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	app := func(n int) {
		for i := range n {
			if _, err := st.Append(ctx, Event{RoutingKey: fmt.Sprint("d", i), Writer: "w"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	app(1)   // starts the window
	app(100) // 101 events in a 5 s window = 20/s > 10/s: split
	advance(5 * time.Second)
	app(1)
	if n := len(st.Topology().Open()); n != 2 {
		t.Fatalf("after a hot window: %d open segments, want 2", n)
	}
	advance(3 * time.Second)
	app(1) // rate ~0: merge back (cool-down passed)
	if n := len(st.Topology().Open()); n != 1 {
		t.Fatalf("after a cold window: %d open segments, want 1", n)
	}
}
