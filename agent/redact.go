package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// redacted replaces a secret wherever the agent shows text.
const redacted = "xxxxx"

// minSecretLen decides where a secret is looked for. A secret of at least
// this many bytes is replaced wherever it appears, in every escaped form
// (it no longer collides with ordinary words: a password "wrong" replaced
// literally turned the status key video/source/wrong-pw into
// video/source/xxxxx-pw, and a one-letter password would blank that
// letter in every line). A shorter one is replaced only where it stands
// as a secret: as a URL's userinfo password or token (`:pw@`, `//pw@`,
// in every escaped form), whatever its length — the URL userinfo pattern
// (RedactURLs) covers any URL besides. The cost of the rule: a short
// password that some output shows outside a URL (none of the agent's
// does: no password has a flag or a field of its own in any output), or
// a piece shorter than this of a password a list parser cut at ',' or
// '/', is not found; a password of 8 bytes or more is found everywhere.
const minSecretLen = 8

// userinfoRE finds the userinfo of a URL inside any text: scheme://userinfo@.
// It is greedy up to the last '@' before the host, so that a password
// holding an unescaped '@' is covered whole. It is the fallback for URLs
// no one told the redactor about; a configured URL's password is found
// literally, whatever characters it holds.
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
		if tokenScheme(scheme) {
			return scheme + "://" + redacted + "@" // a token, not a user name
		}
		return m
	})
}

// tokenScheme: a URL of this scheme with a user and no password carries a
// NATS token.
func tokenScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

// urlStartRE finds where a URL starts in a list, a flag, a command line
// or a YAML file: a scheme at the start or after a comma, a space, '=' or
// a quote (a password may hold "x://" after other characters).
var urlStartRE = regexp.MustCompile(`(?:^|[,\s='"])([a-zA-Z][a-zA-Z0-9+.\-]*)://`)

// urlCredentials returns the password (or NATS token) of every URL in raw
// — one URL, a comma-separated list, a command line — read leniently, as
// written: the userinfo runs to the last '@' before the next URL (or the
// end of the line), so a
// password holding any character (',' '/' ' ' '"' '<' '\' '@' ':' …,
// escaped or not) is returned whole, even when url.Parse refuses it.
func urlCredentials(raw string) []string {
	var out []string
	locs := urlStartRE.FindAllStringSubmatchIndex(raw, -1)
	for i, l := range locs {
		end := len(raw)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		rest := raw[l[1]:end]
		if nl := strings.IndexAny(rest, "\r\n"); nl >= 0 { // a URL holds no line break
			rest = rest[:nl]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		info := rest[:at]
		if _, pw, ok := strings.Cut(info, ":"); ok {
			out = append(out, pw)
		} else if tokenScheme(raw[l[2]:l[3]]) {
			out = append(out, info)
		}
	}
	return out
}

// Redactor removes secrets from text the agent and its commands show:
// the userinfo of every URL, and the literal values of the passwords and
// tokens of the URLs it was given, of password files and variables, of
// NATS creds and nkey seed files — as written and in the escaped forms
// text takes on its way out (percent-encoding, Go and JSON quoting, two
// levels deep: a URL quoted in an error quoted in a log line). It is the
// one redactor of every output: logs (text and JSON), errors, HTTP
// responses, pprof's command line and every subcommand's stdout and
// stderr. Safe for concurrent use; secrets may be added at any time.
type Redactor struct {
	mu sync.RWMutex
	// forms maps each form of each secret to its replacement.
	forms map[string]string
	// rep replaces them all, longest first; rebuilt when forms grow.
	rep *strings.Replacer
}

// NewRedactor returns a redactor that knows no literal secret yet (it
// redacts the userinfo of URLs).
func NewRedactor() *Redactor { return &Redactor{forms: map[string]string{}} }

// newRedactor is the redactor of an agent's configuration.
func newRedactor(c Config) *Redactor {
	r := NewRedactor()
	r.AddConfig(c)
	return r
}

// escapes are the ways text holding a secret is escaped on its way out.
var escapes = []func(string) string{
	url.QueryEscape, url.PathEscape,
	func(s string) string { return url.UserPassword("u", s).String()[2:] }, // userinfo escaping
	func(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] },
	jsonEscaped,
	func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		return strings.TrimSuffix(b.String(), "\n")[1 : b.Len()-2]
	},
}

// AddSecret makes the redactor replace s (trimmed), and its escaped
// forms: wherever they appear when at least minSecretLen bytes long, else
// where they stand as a URL's userinfo.
func (r *Redactor) AddSecret(s string) {
	s = strings.TrimSpace(s)
	r.add(s, len(s) < minSecretLen)
}

// AddURLs makes the redactor replace the password or token of every URL
// in raw (see urlCredentials), decoded and as written, and their escaped
// forms: wherever they appear when at least 4 bytes long, else where they
// stand in a URL's userinfo.
func (r *Redactor) AddURLs(raw string) {
	for _, c := range urlCredentials(raw) {
		r.add(c, len(c) < minSecretLen)
		if d, err := url.PathUnescape(c); err == nil && d != c {
			r.add(d, len(d) < minSecretLen)
		}
		// A list of URLs split at its commas (central.url, a nats.go
		// server list), or a URL parser that ends the authority at '/',
		// '?' or '#' ("invalid port" quoting the rest), shows a password
		// holding one of them in pieces: each piece is a secret too.
		for _, part := range strings.FieldsFunc(c, func(r rune) bool { return strings.ContainsRune(",/?#", r) }) {
			if part != c {
				r.AddSecret(part)
			}
		}
	}
}

// AddConfig adds the secrets a configuration names. Unreadable files are
// skipped (checkFiles reports them).
func (r *Redactor) AddConfig(c Config) {
	readFile := func(path string) {
		if path == "" {
			return
		}
		if b, err := os.ReadFile(path); err == nil {
			r.AddSecret(string(b))
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
				r.AddSecret(l)
			}
		}
	}
	readLines(c.Central.CredsFile)
	readLines(c.Central.NkeySeedFile)
	r.AddURLs(c.Telemetry.Broker)
	r.AddURLs(c.Central.URL)
	for _, src := range c.Video.Sources {
		r.AddURLs(src.URL)
	}
	readFile(c.Telemetry.PasswordFile)
	readFile(c.Central.PasswordFile)
	if c.Telemetry.PasswordEnv != "" {
		r.AddSecret(os.Getenv(c.Telemetry.PasswordEnv))
	}
	readFile(c.MAVLink.Signing.KeyFile)
	if c.MAVLink.Signing.KeyEnv != "" {
		r.AddSecret(os.Getenv(c.MAVLink.Signing.KeyEnv))
	}
}

// add records the forms of secret s; inURL: only where it stands as a
// URL's userinfo.
func (r *Redactor) add(s string, inURL bool) {
	if s == "" {
		return
	}
	forms := map[string]bool{s: true}
	for _, e := range escapes {
		f := e(s)
		forms[f] = true
		for _, e2 := range escapes {
			forms[e2(f)] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	grew := false
	put := func(k, v string) {
		if _, ok := r.forms[k]; !ok {
			r.forms[k], grew = v, true
		}
	}
	for f := range forms {
		if inURL {
			put(":"+f+"@", ":"+redacted+"@")
			put("//"+f+"@", "//"+redacted+"@")
		} else {
			put(f, redacted)
		}
	}
	if !grew {
		return
	}
	keys := make([]string, 0, len(r.forms))
	for k := range r.forms {
		keys = append(keys, k)
	}
	// Longest first: at one position the longest form wins (a JSON form
	// holding the raw one, a userinfo holding the password).
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, k, r.forms[k])
	}
	r.rep = strings.NewReplacer(pairs...)
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// String returns s without secrets: the literal ones first (they may hold
// characters the URL pattern stops at), then the userinfo of any URL.
func (r *Redactor) String(s string) string {
	r.mu.RLock()
	rep := r.rep
	r.mu.RUnlock()
	if rep != nil {
		s = rep.Replace(s)
	}
	return RedactURLs(s)
}

// Error wraps err so that its message is redacted; errors.Is and As still
// see the original chain.
func (r *Redactor) Error(err error) error {
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
func (r *Redactor) Handler(h slog.Handler) slog.Handler { return redactHandler{next: h, r: r} }

// Middleware buffers each response of next and redacts its body (for
// /status and /metrics: every byte the agent serves passes through it).
func (r *Redactor) Middleware(next http.Handler) http.Handler {
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
	r    *Redactor
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

// maxLineBuffer bounds what a redacting writer holds waiting for the end
// of a line; a longer line is redacted and written as it stands.
const maxLineBuffer = 1 << 20

// RedactWriter passes what is written to it on, redacted, line by line
// ('\n' or '\r' ends a line: a progress bar redraws with '\r'), so a
// secret split across writes is still found. Flush writes a partial
// line. Safe for concurrent use.
type RedactWriter struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

// Writer returns w behind the redactor.
func (r *Redactor) Writer(w io.Writer) *RedactWriter { return &RedactWriter{r: r, w: w} }

// Write buffers p and writes every complete line, redacted. It reports
// len(p) unless the underlying writer failed.
func (rw *RedactWriter) Write(p []byte) (int, error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf = append(rw.buf, p...)
	i := bytes.LastIndexAny(rw.buf, "\n\r")
	if i < 0 && len(rw.buf) < maxLineBuffer {
		return len(p), nil
	}
	if i < 0 {
		i = len(rw.buf) - 1
	}
	_, err := io.WriteString(rw.w, rw.r.String(string(rw.buf[:i+1])))
	rw.buf = append(rw.buf[:0], rw.buf[i+1:]...)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is buffered, redacted.
func (rw *RedactWriter) Flush() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(rw.w, rw.r.String(string(rw.buf)))
	rw.buf = rw.buf[:0]
	return err
}
