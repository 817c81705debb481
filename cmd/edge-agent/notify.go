package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/edge-agent/edge-agent/agent"
)

// notifySystemd speaks systemd's notify protocol for `run` under a unit of
// Type=notify (deploy/edge-agent.service), through go-systemd's daemon
// package: READY=1 once the agent is ready (the store open, every intake
// bound, the HTTP listener up: agent.Ready), WATCHDOG=1 every half of
// WatchdogSec while the agent is alive (agent.Alive: its sampling loop,
// which reads every stream's watermarks and replication, ran recently),
// and STOPPING=1 when the run ends. Without NOTIFY_SOCKET (not under
// systemd) it does nothing. The returned func stops it.
func notifySystemd(ctx context.Context, a *agent.Agent, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-a.Ready():
		case <-ctx.Done():
			return
		}
		if sent, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
			log.Warn("systemd: READY=1 not sent", "err", err)
		} else if !sent {
			return // not under systemd
		}
		every, err := daemon.SdWatchdogEnabled(false)
		if err != nil || every <= 0 {
			<-ctx.Done()
			return
		}
		t := time.NewTicker(every / 2)
		defer t.Stop()
		for {
			if err := a.Alive(time.Now()); err != nil {
				// No WATCHDOG=1: systemd kills and restarts a hung agent
				// at WatchdogSec.
				log.Error("systemd: watchdog not fed", "err", err)
			} else {
				daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		daemon.SdNotify(false, daemon.SdNotifyStopping)
	}
}
