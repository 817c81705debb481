package specreader

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Message is one layout-1 message: its subject, NATS headers and payload.
type Message struct {
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers"`
	Payload []byte              `json:"payload"`
}

// Txn is a layout-1 transaction decoded ("Golden vectors": the pack form
// with "layout": 1 instead of version, codec and kind).
type Txn struct {
	Layout int     `json:"layout"`
	Txn    uint64  `json:"txn"`
	Commit *Commit `json:"commit"`
	Events []Event `json:"events"`
}

// flagHeaders are the layout-1 flag headers and their bits ("Flags").
var flagHeaders = []struct {
	name string
	bit  uint64
}{
	{"Edge-Keyframe", 1}, {"Edge-Discontinuity", 2}, {"Edge-Late", 4}, {"Edge-Estimated-Time", 8},
	{"Edge-Gap", 16}, {"Edge-Raw", 32}, {"Edge-Clock-Skew", 64},
}

// DecodeLayout1 reads one agent's layout-1 transaction: its data messages
// and the JSON commit record on the cut subject ("Layout 1", "Commit
// records").
func DecodeLayout1(msgs []Message) (*Txn, error) {
	t := &Txn{Layout: 1, Events: []Event{}}
	for _, m := range msgs {
		toks := strings.Split(m.Subject, ".")
		switch {
		case len(toks) == 4 && toks[0] == "edge" && toks[3] == "cut":
			c, err := jsonCommit(m.Payload)
			if err != nil {
				return nil, err
			}
			t.Commit = c
		case len(toks) == 5 && toks[0] == "edge" && toks[3] == "data":
			e, txn, err := dataMessage(toks[4], m)
			if err != nil {
				return nil, fmt.Errorf("specreader: %s: %w", m.Subject, err)
			}
			t.Txn = txn
			t.Events = append(t.Events, e)
		default:
			return nil, fmt.Errorf("specreader: subject %q", m.Subject)
		}
	}
	return t, nil
}

// dataMessage decodes one event and its transaction number.
func dataMessage(token string, m Message) (Event, uint64, error) {
	h := func(k string) (string, bool) {
		v, ok := m.Headers[k]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[0], true
	}
	var err error
	num := func(k string) uint64 {
		v, _ := h(k)
		n, e := strconv.ParseUint(v, 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("header %s %q", k, v)
		}
		return n
	}
	signed := func(k string, optional bool) int64 {
		v, ok := h(k)
		if !ok && optional {
			return 0
		}
		n, e := strconv.ParseInt(v, 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("header %s %q", k, v)
		}
		return n
	}
	exact := func(k string) (string, bool) {
		v, ok := h(k)
		if !ok {
			return "", false
		}
		d, e := headerValue(v)
		if e != nil && err == nil {
			err = fmt.Errorf("header %s: %w", k, e)
		}
		return d, true
	}
	e := Event{Headers: [][2]string{}, Payload: m.Payload}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Segment, e.Offset = num("Edge-Segment"), num("Edge-Offset")
	txn := num("Edge-Txn")
	e.EventTimeNs, e.IngestTimeNs = signed("Edge-Event-Time", false), signed("Edge-Ingest-Time", true)
	e.Writer, _ = exact("Edge-Writer")
	e.ContentType, _ = exact("Content-Type")
	for _, f := range flagHeaders {
		if v, _ := h(f.name); v == "1" {
			e.Flags |= f.bit
		}
	}
	if v, ok := exact("Edge-Mqtt-Topic"); ok {
		e.Headers = append(e.Headers, [2]string{"mqtt-topic", v})
	}
	if v, ok := exact("Edge-Frame-Pts"); ok {
		e.Headers = append(e.Headers, [2]string{"frame-pts", v})
	}
	if q, ok := h("Edge-Headers"); ok && q != "" {
		for _, kv := range strings.Split(q, "&") {
			k, v, _ := strings.Cut(kv, "=")
			k, e1 := url.QueryUnescape(k)
			v, e2 := url.QueryUnescape(v)
			if (e1 != nil || e2 != nil) && err == nil {
				err = fmt.Errorf("Edge-Headers %q", q)
			}
			e.Headers = append(e.Headers, [2]string{k, v})
		}
	}
	if reason, ok := exact("Edge-Dropped"); ok {
		if e.Dropped = reason; reason == "" {
			e.Dropped = "unknown"
		}
		if len(m.Payload) != 0 && err == nil {
			err = errors.New("a marker with a payload")
		}
	}
	if strings.Contains(token, "%%") {
		key, ok := exact("Edge-Routing-Key")
		_, truncated := h("Edge-Truncated")
		if !ok || (!truncated && keyToken(key) != token) {
			if err == nil {
				err = fmt.Errorf("hashed token %q without the key that hashes to it", token)
			}
		}
		e.RoutingKey = key
	} else {
		key, e1 := unescapeToken(token)
		if e1 != nil && err == nil {
			err = e1
		}
		e.RoutingKey = key
	}
	return e, txn, err
}

// headerValue decodes a byte-exact header value ("Byte-exact header
// values"), strictly.
func headerValue(v string) (string, error) {
	needs := func(s string) bool {
		if s == "" {
			return false
		}
		if s[0] == ' ' || s[len(s)-1] == ' ' || s[0] == '%' {
			return true
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == 0x7F {
				return true
			}
		}
		return false
	}
	if !strings.HasPrefix(v, "%") {
		if needs(v) {
			return "", fmt.Errorf("%q should be escaped", v)
		}
		return v, nil
	}
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c != '%' {
			if c <= 0x20 || c == 0x7F {
				return "", fmt.Errorf("%q: byte %#x not escaped", v, c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(v) || strings.IndexByte(hexd, v[i+1]) < 0 || strings.IndexByte(hexd, v[i+2]) < 0 {
			return "", fmt.Errorf("%q: bad escape", v)
		}
		d := byte(strings.IndexByte(hexd, v[i+1])<<4 | strings.IndexByte(hexd, v[i+2]))
		if d > 0x20 && d != '%' && d != 0x7F {
			return "", fmt.Errorf("%q: needless escape", v)
		}
		b.WriteByte(d)
		i += 2
	}
	if !needs(b.String()) {
		return "", fmt.Errorf("%q: escaped form of a plain value", v)
	}
	return b.String(), nil
}

// keyToken is a routing key's subject token ("Subject tokens").
func keyToken(key string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	if key == "" {
		return "%"
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
		}
	}
	t := b.String()
	if len(t) <= 128 {
		return t
	}
	n := 0
	for n < len(t) {
		step := 1
		if t[n] == '%' {
			step = 3
		}
		if n+step > 128-2-32 {
			break
		}
		n += step
	}
	sum := sha256.Sum256([]byte(key))
	return t[:n] + "%%" + hex.EncodeToString(sum[:16])
}

// jsonCommit decodes a layout-1 commit record; absent fields are empty.
func jsonCommit(b []byte) (*Commit, error) {
	var j struct {
		Agent, Stream, Instance, Store, Station string
		Txn                                     uint64
		EpochBase                               uint64            `json:"epoch_base"`
		Cut                                     map[string]uint64 `json:"cut"`
		Watermark                               struct {
			LowerNs int64             `json:"lower_ns"`
			UpperNs int64             `json:"upper_ns"`
			Cut     map[string]uint64 `json:"cut"`
		} `json:"watermark"`
		Events        uint64 `json:"events"`
		Bytes         uint64 `json:"bytes"`
		CommittedAtNs int64  `json:"committed_at_ns"`
		Lost          *struct {
			Reason, Store string
			From, To      map[string]uint64
			CentralSeq    uint64 `json:"central_seq"`
			FoundAtNs     int64  `json:"found_at_ns"`
		} `json:"lost"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("specreader: commit record: %w", err)
	}
	if j.Txn == 0 || len(j.Cut) == 0 {
		return nil, errors.New("specreader: commit record without txn or cut")
	}
	m := func(c map[string]uint64) map[string]uint64 {
		if c == nil {
			return map[string]uint64{}
		}
		return c
	}
	c := &Commit{Agent: j.Agent, Stream: j.Stream, Txn: j.Txn, Instance: j.Instance, Store: j.Store, Station: j.Station,
		EpochBase: j.EpochBase, Cut: j.Cut, Watermark: Watermark{LowerNs: j.Watermark.LowerNs, UpperNs: j.Watermark.UpperNs, Cut: m(j.Watermark.Cut)},
		Events: j.Events, Bytes: j.Bytes, CommittedAtNs: j.CommittedAtNs}
	if l := j.Lost; l != nil {
		c.Lost = &Lost{Reason: l.Reason, Store: l.Store, From: m(l.From), To: m(l.To), CentralSeq: l.CentralSeq, FoundAtNs: l.FoundAtNs}
	}
	return c, nil
}
