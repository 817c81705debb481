package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edge-agent/edge-agent/broker"
	"github.com/edge-agent/edge-agent/central"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttsim"
	"github.com/edge-agent/edge-agent/internal/testkit"
	"github.com/edge-agent/edge-agent/internal/testkit/rigs"
	"github.com/edge-agent/edge-agent/replicate"
)

// TestOutageOnStatusPage (issues 38, 40 item 5): the centre goes away
// behind a proxy while drones fly. /status and the page in Chromium say
// since when, why in words (not nats.go's "outbound buffer limit
// exceeded"), how much waits and when it will all be at the centre at
// the cap; no stream claims to catch up while nothing commits (the empty
// video stream said "0.0 s" while retrying), and the live lane says it
// is not delivering (it said "problems 0"). Once the centre is back the
// outage and its errors are gone from both while the backlog drains.
func TestOutageOnStatusPage(t *testing.T) {
	exe := chromium(t)
	ctx := context.Background()
	brk, err := broker.Start(ctx, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer brk.Stop()
	srv := rigs.StartCentral(t, central.Config{})
	px := testkit.NewProxy(t, srv.ClientURL()[len("nats://"):], testkit.ProxyHooks{})
	cfg := testConfig(t, t.TempDir(), brk.URL())
	cfg.Central.URL = "nats://" + px.Addr()
	cfg.Central.UplinkBytesPerSec = 50_000
	cfg.Telemetry.Topics = []string{"drones/+/telemetry"}
	a, cancel, done := startAgent(t, cfg)
	defer func() { cancel(); <-done }()
	base := "http://" + a.HTTPAddr()
	flying, land := context.WithCancel(ctx)
	defer land()
	go mqttsim.Simulate(flying, mqttsim.Config{Broker: brk.URL(), Drones: 2, Rate: 20, Duration: 3 * time.Minute})

	status := func() Status {
		var s Status // decoding into a used map would keep its keys
		getJSON(t, base+"/status", &s)
		return s
	}
	var s Status
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		s = status()
		tm := streamStatus(s, "telemetry")
		return tm.Replication != nil && tm.Replication.Events > 0
	}) {
		t.Fatalf("nothing replicated before the outage: %+v", s.Uplink)
	}
	cutAt := time.Now()
	px.SetDown(true)
	px.Cut()
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		s = status()
		if s.Uplink == nil || !s.Uplink.Down || s.Uplink.BacklogEvents == 0 || s.Uplink.ETASeconds == nil {
			return false
		}
		for _, st := range s.Streams {
			if st.Replication.State != replicate.StateRetrying {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("outage not in /status, or not every stream retrying: %+v", s.Uplink)
	}
	for _, st := range s.Streams {
		if cu := st.CatchUp; cu.ETASeconds != nil {
			t.Errorf("stream %s %v with %d events waiting claims to catch up in %.1f s", st.Name, st.Replication.State, cu.BacklogEvents, *cu.ETASeconds)
		}
	}
	u := s.Uplink
	if px.Cuts() == 0 || u.DownSince.Before(cutAt.Add(-time.Second)) || !strings.HasPrefix(u.Cause, "centre unreachable") ||
		u.ETABasis != "cap" || !strings.HasPrefix(s.Errors["central"], "centre unreachable") {
		t.Fatalf("outage in /status: cuts %d, %+v, errors %v", px.Cuts(), u, s.Errors)
	}
	for k, v := range s.Errors {
		if strings.Contains(v, "outbound buffer") {
			t.Errorf("error %s in nats.go's words: %s", k, v)
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 3*time.Minute) // a fail-safe, not a figure
	defer tcancel()
	poll := func(pred string) error {
		_, err := chromedp.Run(bctx, chromedp.Poll[bool](pred, chromedp.WithPollingTimeout(0)))
		return err
	}
	type shown struct {
		Outage       string
		OutageHidden bool
		Backlog, ETA string
		Errors       []string
		// StreamETA is each stream row's "caught up in"; Live each live
		// lane row's problems and last sent.
		StreamETA map[string]string
		Live      map[string][2]string
	}
	const read = `(() => ({
	  Outage: document.getElementById("outage").textContent,
	  OutageHidden: document.getElementById("outage").hidden,
	  Backlog: document.querySelector('td[data-k="uplink_backlog"]').textContent,
	  ETA: document.querySelector('td[data-k="uplink_eta"]').textContent,
	  Errors: [...document.querySelectorAll("#errors li")].map(li => li.textContent),
	  StreamETA: Object.fromEntries([...document.querySelectorAll("#streams tbody tr")].map(tr =>
	    [tr.dataset.stream, tr.querySelector('td[data-k="eta"]').textContent])),
	  Live: Object.fromEntries([...document.querySelectorAll("#live tbody tr")].map(tr =>
	    [tr.dataset.live, [tr.querySelector('td[data-k="problems"]').textContent, tr.querySelector('td[data-k="last_sent"]').textContent]])),
	}))()`
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/?interval=250")); err != nil {
		t.Fatal(err)
	}
	if err := poll(`!document.getElementById("outage").hidden && window.edgePage.polls >= 2`); err != nil {
		t.Fatal(err)
	}
	// The lane's telemetry drones fly on: their values wait.
	stalled := poll10(bctx, `(() => { const td = document.querySelector('tr[data-live="telemetry"] td[data-k="problems"]');
	  return td != null && td.textContent.includes("not delivering"); })()`)
	p, err := chromedp.Run(bctx, chromedp.Evaluate[shown](read))
	if err != nil {
		t.Fatal(err)
	}
	for name, eta := range p.StreamETA {
		if eta != "not catching up" {
			t.Errorf("page during the outage: stream %s caught up in %q", name, eta)
		}
	}
	if stalled != nil {
		t.Errorf("page during the outage: the live lane does not say it is not delivering (problems, last sent): %v", p.Live)
	} else if !slices.ContainsFunc(p.Errors, func(e string) bool {
		return strings.HasPrefix(e, "live/telemetry: not delivering since ") && strings.Contains(e, "centre unreachable")
	}) {
		t.Errorf("page during the outage: the live lane not delivering, but not among the errors: %q", p.Errors)
	}
	// The page names /status's since-when (and so /readyz's: one record,
	// TestCentreAwayOneAnswer), as the browser writes a time.
	since, err := chromedp.Run(bctx, chromedp.Evaluate[string](
		fmt.Sprintf("new Date(%q).toLocaleTimeString()", u.DownSince.Format(time.RFC3339Nano))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Outage, "since "+since+" (") || !strings.Contains(p.Outage, "centre unreachable") ||
		!strings.Contains(p.Backlog, " events") || !strings.HasSuffix(p.ETA, " at the cap") {
		t.Fatalf("page during the outage (down since %s): %+v", since, p)
	}
	t.Logf("during the outage: %q | backlog %q | complete in %q | streams %v | live %v", p.Outage, p.Backlog, p.ETA, p.StreamETA, p.Live)

	px.SetDown(false)
	if !testkit.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool {
		s = status()
		_, central := s.Errors["central"]
		_, sync := s.Errors["sync/telemetry"]
		return s.Uplink != nil && !s.Uplink.Down && !central && !sync
	}) {
		t.Fatalf("after the centre came back: %+v, errors %v", s.Uplink, s.Errors)
	}
	if err := poll(`document.getElementById("outage").hidden`); err != nil {
		t.Fatal(err)
	}
	delivering := poll10(bctx, `![...document.querySelectorAll('#live td[data-k="problems"]')].some(td => td.textContent.includes("not delivering"))`)
	if p, err = chromedp.Run(bctx, chromedp.Evaluate[shown](read)); err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Errors {
		if strings.Contains(e, "unreachable") || strings.Contains(e, "not connected") {
			t.Errorf("the outage's error still on the page once the centre is back: %q", e)
		}
	}
	if delivering != nil {
		t.Errorf("the live lane still not delivering once the centre is back: %v", p.Live)
	}
	t.Logf("after: backlog %q | complete in %q | errors %v | live %v", p.Backlog, p.ETA, p.Errors, p.Live)
}

// poll10 waits up to 10 s for the page's pred to hold.
func poll10(ctx context.Context, pred string) error {
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](pred, chromedp.WithPollingTimeout(10*time.Second)))
	return err
}
