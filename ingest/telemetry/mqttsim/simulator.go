package mqttsim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/mqttwire"
)

// Config configures Simulate. The zero value of each field gives the
// default noted on it.
type Config struct {
	// Broker is the MQTT broker URL. Required.
	Broker string
	// Drones is the number of simulated drones. Default 1.
	Drones int
	// DronePrefix names them: <prefix>1 .. <prefix>N. Default "drone-".
	DronePrefix string
	// Rate is messages per second per drone; 0 = as fast as the broker acks.
	Rate float64
	// Duration stops publishing after this long; 0 = until Count.
	Duration time.Duration
	// Count stops each drone after this many messages; 0 = until Duration.
	// At least one of Duration and Count must be set.
	Count int
	// QoS of the telemetry and status messages: 0, 1 (default) or 2.
	QoS *byte
	// TopicPrefix: telemetry goes to <prefix>/<drone>/telemetry, status to
	// <prefix>/<drone>/status. Default "drones".
	TopicPrefix string
	// FirstSeq is the seq of each drone's first message. Default 1.
	FirstSeq uint64
	// Window is the publishes in flight per drone (not yet acked by the
	// broker). Default 1: strict order even if the connection drops; larger
	// windows go faster.
	Window int
	// NoStatus disables the online status and the offline last will.
	NoStatus bool
	// Seed makes flight paths reproducible. Default 1.
	Seed uint64
	// ClientPrefix prefixes the publishers' client ids. Default "sim-".
	ClientPrefix string
	// Now is the clock for the payload timestamps. Default time.Now.
	Now func() time.Time
	// OnPublished, if set, is called after the broker acked each message;
	// it is called concurrently from the drones' goroutines.
	OnPublished func(drone, topic string, seq uint64, payload []byte)
}

// DroneResult is what one simulated drone published.
type DroneResult struct {
	// Topic is its telemetry topic.
	Topic string
	// Published messages acked by the broker; FirstSeq..LastSeq are their seqs.
	Published         uint64
	FirstSeq, LastSeq uint64
	// Retries are publishes that failed and were sent again (with the same seq).
	Retries uint64
}

// Result is what Simulate published.
type Result struct {
	// Drones by name.
	Drones map[string]DroneResult
	// Published is the total over the drones.
	Published uint64
	// Elapsed is the publishing time.
	Elapsed time.Duration
}

// Telemetry is one simulated telemetry message (the JSON payload).
type Telemetry struct {
	Drone     string  `json:"drone"`
	Seq       uint64  `json:"seq"`
	Timestamp int64   `json:"timestamp"` // Unix ms
	Lat       float64 `json:"lat"`
	Lon       float64 `json:"lon"`
	AltM      float64 `json:"alt_m"`
	RollDeg   float64 `json:"roll_deg"`
	PitchDeg  float64 `json:"pitch_deg"`
	YawDeg    float64 `json:"yaw_deg"`
	SpeedMps  float64 `json:"speed_mps"`
	Battery   float64 `json:"battery_pct"`
	Mode      string  `json:"mode"`
}

func (c *Config) setDefaults() {
	if c.Drones == 0 {
		c.Drones = 1
	}
	if c.DronePrefix == "" {
		c.DronePrefix = "drone-"
	}
	if c.QoS == nil {
		q := byte(1)
		c.QoS = &q
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = "drones"
	}
	if c.FirstSeq == 0 {
		c.FirstSeq = 1
	}
	if c.Window == 0 {
		c.Window = 1
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.ClientPrefix == "" {
		c.ClientPrefix = "sim-"
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Broker == "":
		return fmt.Errorf("%w: simulator: mqtt broker is required", ErrConfig)
	case c.Drones < 0 || c.Drones > 10000:
		return fmt.Errorf("%w: simulator: drones %d: want 1..10000", ErrConfig, c.Drones)
	case c.Rate < 0:
		return fmt.Errorf("%w: simulator: rate %v: want ≥ 0 (0 = as fast as possible)", ErrConfig, c.Rate)
	case c.Duration <= 0 && c.Count <= 0:
		return fmt.Errorf("%w: simulator: set a duration or a count", ErrConfig)
	case c.QoS != nil && *c.QoS > 2:
		return fmt.Errorf("%w: simulator: qos %d: want 0, 1 or 2", ErrConfig, *c.QoS)
	case c.Window < 0:
		return fmt.Errorf("%w: simulator: window must not be negative", ErrConfig)
	}
	return nil
}

// DroneName is the name of simulated drone i (1-based).
func (c Config) DroneName(i int) string {
	p := c.DronePrefix
	if p == "" {
		p = "drone-"
	}
	return fmt.Sprintf("%s%d", p, i)
}

// Simulate publishes telemetry for cfg.Drones drones until Count or
// Duration (or ctx) ends, then marks them offline, and reports what the
// broker acked. Each drone has its own connection with a last will of
// "offline" (retained) on its status topic and announces "online" first.
func Simulate(ctx context.Context, cfg Config) (Result, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	res := Result{Drones: map[string]DroneResult{}}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	start := time.Now()
	for i := 1; i <= cfg.Drones; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := newSimDrone(cfg, i)
			r, err := d.run(ctx)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			mu.Lock()
			res.Drones[d.name] = r
			res.Published += r.Published
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return res, err
	}
	return res, nil
}

// simDrone flies one drone along a circle around its home point.
type simDrone struct {
	cfg                 Config
	name                string
	topic, statusTopic  string
	homeLat, homeLon    float64
	radiusM, speed, alt float64
	phase               float64
}

func newSimDrone(cfg Config, i int) *simDrone {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	name := cfg.DroneName(i)
	return &simDrone{
		cfg: cfg, name: name,
		topic:       cfg.TopicPrefix + "/" + name + "/telemetry",
		statusTopic: cfg.TopicPrefix + "/" + name + "/status",
		homeLat:     48.0 + rng.Float64(), homeLon: 11.0 + rng.Float64(),
		radiusM: 150 + 350*rng.Float64(), speed: 8 + 10*rng.Float64(), alt: 50 + 70*rng.Float64(),
		phase: 2 * math.Pi * rng.Float64(),
	}
}

// sample is the drone's state at elapsed seconds t.
func (d *simDrone) sample(seq uint64, now time.Time, t float64) Telemetry {
	omega := d.speed / d.radiusM
	a := d.phase + omega*t
	const mPerDegLat = 111_320.0
	lat := d.homeLat + d.radiusM*math.Sin(a)/mPerDegLat
	lon := d.homeLon + d.radiusM*math.Cos(a)/(mPerDegLat*math.Cos(d.homeLat*math.Pi/180))
	heading := math.Mod(360+90-(a+math.Pi/2)*180/math.Pi, 360)
	bank := math.Atan(d.speed*omega/9.81) * 180 / math.Pi
	return Telemetry{
		Drone: d.name, Seq: seq, Timestamp: now.UnixMilli(),
		Lat: round(lat, 7), Lon: round(lon, 7), AltM: round(d.alt+3*math.Sin(t/7), 2),
		RollDeg: round(bank, 2), PitchDeg: round(2*math.Sin(t/3), 2), YawDeg: round(heading, 2),
		SpeedMps: round(d.speed, 2), Battery: round(math.Max(0, 100-t*0.02), 2), Mode: "AUTO",
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

func (d *simDrone) run(ctx context.Context) (DroneResult, error) {
	cfg := d.cfg
	qos := *cfg.QoS
	r := DroneResult{Topic: d.topic}
	o := paho.NewClientOptions().AddBroker(cfg.Broker).SetClientID(cfg.ClientPrefix + d.name).
		SetCleanSession(true).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(200 * time.Millisecond).SetMaxReconnectInterval(2 * time.Second).
		SetWriteTimeout(10 * time.Second)
	if !strings.HasPrefix(cfg.Broker, "ws") {
		o.SetCustomOpenConnectionFn(dial) // fewer syscalls per publish: a lighter load generator
	}
	if !cfg.NoStatus {
		o.SetWill(d.statusTopic, "offline", qos, true)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		c.Disconnect(0)
		return r, fmt.Errorf("telemetry: simulator %s: not connected to %s: %w", d.name, cfg.Broker, ctx.Err())
	}
	if tok.Error() != nil {
		return r, fmt.Errorf("telemetry: simulator %s: connect: %w", d.name, tok.Error())
	}
	defer c.Disconnect(250)
	if !cfg.NoStatus {
		c.Publish(d.statusTopic, qos, true, "online").WaitTimeout(10 * time.Second)
	}
	type sent struct {
		tok paho.Token
		seq uint64
		buf []byte
	}
	window := make(chan sent, cfg.Window) // FIFO of publishes in flight
	// settle waits for the oldest in-flight publish, retrying it on error.
	settle := func(s sent) {
		for {
			s.tok.Wait()
			if s.tok.Error() == nil {
				if r.Published == 0 {
					r.FirstSeq = s.seq
				}
				r.Published++
				r.LastSeq = s.seq
				if cfg.OnPublished != nil {
					cfg.OnPublished(d.name, d.topic, s.seq, s.buf)
				}
				return
			}
			r.Retries++
			time.Sleep(50 * time.Millisecond)
			s.tok = c.Publish(d.topic, qos, false, s.buf)
		}
	}
	start := time.Now()
	seq := cfg.FirstSeq
	for n := 0; cfg.Count == 0 || n < cfg.Count; n++ {
		if cfg.Rate > 0 {
			due := start.Add(time.Duration(float64(n) / cfg.Rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		now := cfg.Now()
		buf, _ := json.Marshal(d.sample(seq, now, time.Since(start).Seconds()))
		if len(window) == cap(window) {
			settle(<-window)
		}
		window <- sent{c.Publish(d.topic, qos, false, buf), seq, buf}
		seq++
	}
	close(window)
	for s := range window {
		settle(s)
	}
	if !cfg.NoStatus {
		c.Publish(d.statusTopic, qos, true, "offline").WaitTimeout(10 * time.Second)
	}
	return r, nil
}

// ErrConfig: a Config field is invalid; the message names the field.
var ErrConfig = errors.New("telemetry: invalid simulator config")

// dial opens the publishers' tcp/mqtt and ssl/tls/mqtts connections for
// paho through a mqttwire.BufferedConn: fewer syscalls per publish, a
// lighter load generator. (ws/wss use paho's own dialer.)
func dial(uri *url.URL, o paho.ClientOptions) (net.Conn, error) {
	d := &net.Dialer{Timeout: o.ConnectTimeout}
	var (
		c   net.Conn
		err error
	)
	switch uri.Scheme {
	case "tcp", "mqtt":
		c, err = d.Dial("tcp", uri.Host)
	case "ssl", "tls", "mqtts", "tcps":
		c, err = tls.DialWithDialer(d, "tcp", uri.Host, o.TLSConfig)
	default:
		return nil, fmt.Errorf("%w: scheme %q", ErrConfig, uri.Scheme)
	}
	if err != nil {
		return nil, err
	}
	return mqttwire.NewBufferedConn(c), nil
}
