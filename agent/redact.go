package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// redacted replaces a secret wherever the agent shows text.
const redacted = "xxxxx"

// minSecretLen: shorter literal secrets are not searched for (a one-letter
// password would blank every such letter); the userinfo of a URL is
// redacted whatever its length.
const minSecretLen = 4

// userinfoRE finds the userinfo of a URL inside any text: scheme://userinfo@.
// It is greedy up to the last '@' before the host, so that a password
// holding an unescaped '@' is covered whole.
var userinfoRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.\-]*)://([^/\s,"'<>\\]*)@`)

// RedactURLs returns s with the password of every URL in it replaced
// (`tcp://user:xxxxx@host`); a NATS token (`nats://token@host`) is
// replaced whole.
func RedactURLs(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfoRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfoRE.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, _, ok := strings.Cut(info, ":"); ok {
			return scheme + "://" + user + ":" + redacted + "@"
		}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "ws", "wss":
			return scheme + "://" + redacted + "@" // a token, not a user name
		}
		return m
	})
}

// redactor removes the configured secrets from text the agent shows: the
// userinfo of every URL, and the literal values of the passwords read from
// files and environment variables and of NATS creds and nkey seed files (also in their JSON-escaped and
// URL-escaped forms). It is immutable and safe for concurrent use.
type redactor struct {
	secrets []string
}

// newRedactor collects the secrets a configuration names. Unreadable
// files are skipped (checkFiles reports them).
func newRedactor(c Config) *redactor {
	r := &redactor{}
	add := func(s string) {
		s = strings.TrimSpace(s)
		if len(s) < minSecretLen {
			return
		}
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s), jsonEscaped(s)} {
			r.secrets = append(r.secrets, v)
		}
	}
	readFile := func(path string) {
		if path == "" {
			return
		}
		if b, err := os.ReadFile(path); err == nil {
			add(string(b))
		}
	}
	urlSecrets := func(raw string) {
		for u := range strings.SplitSeq(raw, ",") {
			pu, err := url.Parse(strings.TrimSpace(u))
			if err != nil || pu.User == nil {
				continue
			}
			if p, ok := pu.User.Password(); ok {
				add(p)
			} else {
				add(pu.User.Username()) // a NATS token
			}
		}
	}
	// A creds file holds a JWT and an nkey seed, an nkey seed file the seed:
	// each long line of them is a secret (comments and markers are short
	// or start with '-').
	readLines := func(path string) {
		if path == "" {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		for l := range strings.Lines(string(b)) {
			if l = strings.TrimSpace(l); len(l) >= 20 && !strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "*") {
				add(l)
			}
		}
	}
	readLines(c.Central.CredsFile)
	readLines(c.Central.NkeySeedFile)
	urlSecrets(c.Telemetry.Broker)
	urlSecrets(c.Central.URL)
	readFile(c.Telemetry.PasswordFile)
	readFile(c.Central.PasswordFile)
	if c.Telemetry.PasswordEnv != "" {
		add(os.Getenv(c.Telemetry.PasswordEnv))
	}
	readFile(c.MAVLink.Signing.KeyFile)
	if c.MAVLink.Signing.KeyEnv != "" {
		add(os.Getenv(c.MAVLink.Signing.KeyEnv))
	}
	return r
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// String returns s without secrets.
func (r *redactor) String(s string) string {
	s = RedactURLs(s)
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}

// Error wraps err so that its message is redacted; errors.Is and As still
// see the original chain.
func (r *redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err: err, msg: r.String(err.Error())}
}

type redactedError struct {
	err error
	msg string
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// Handler wraps h so that every log record leaves without secrets.
func (r *redactor) Handler(h slog.Handler) slog.Handler { return redactHandler{next: h, r: r} }

// Middleware buffers each response of next and redacts its body (for
// /status and /metrics: every byte the agent serves passes through it).
func (r *redactor) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &bufferedResponse{header: w.Header(), code: http.StatusOK}
		next.ServeHTTP(rec, req)
		body := r.String(rec.buf.String())
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.code)
		w.Write([]byte(body))
	})
}

type bufferedResponse struct {
	header http.Header
	buf    bytes.Buffer
	code   int
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.buf.Write(p) }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }

// redactHandler is a slog.Handler that redacts the message and every
// attribute (strings, errors, Stringers, groups, LogValuers).
type redactHandler struct {
	next slog.Handler
	r    *redactor
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return redactHandler{next: h.next.WithAttrs(red), r: h.r}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{next: h.next.WithGroup(name), r: h.r}
}

func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			s = fmt.Sprint(x)
		}
		if red := h.r.String(s); red != s {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
