package specreader

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const goldenDir = "../../testdata/central-format"

// golden is one vector: its pack and the JSON the agent's decoder wrote.
type golden struct {
	name       string
	pack, json []byte
	subject    string
	// refused says why a reader refuses the pack ("": it reads).
	refused string
}

func vectors(t testing.TB) []golden {
	packs, err := filepath.Glob(filepath.Join(goldenDir, "*.pack"))
	if err != nil || len(packs) < 20 {
		t.Fatalf("%d golden packs in %s: %v", len(packs), goldenDir, err)
	}
	var out []golden
	for _, p := range packs {
		g := golden{name: filepath.Base(p)}
		if g.pack, err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
		if g.json, err = os.ReadFile(strings.TrimSuffix(p, ".pack") + ".json"); err != nil {
			t.Fatal(err)
		}
		var s struct{ Subject, Refused string }
		if err := json.Unmarshal(g.json, &s); err != nil {
			t.Fatal(err)
		}
		g.subject, g.refused = s.Subject, s.Refused
		out = append(out, g)
	}
	return out
}

// generic parses JSON keeping numbers exact.
func generic(t testing.TB, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGoldenVectors: this reader, written from docs/central-format.md
// alone, reads every golden pack (version 1 and 2) to the JSON the agent's
// decoder wrote.
func TestGoldenVectors(t *testing.T) {
	versions := map[int]int{}
	refused := 0
	for _, g := range vectors(t) {
		p, err := Decode(g.subject, g.pack)
		if g.refused != "" {
			if err == nil {
				t.Errorf("%s: read, want it refused (%s)", g.name, g.refused)
			}
			refused++
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", g.name, err)
			continue
		}
		versions[p.Version]++
		got, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(generic(t, got), generic(t, g.json)) {
			t.Errorf("%s: decodes differently\n got %.800s\nwant %.800s", g.name, got, g.json)
		}
	}
	if versions[1] < 10 || versions[2] < 10 || refused == 0 {
		t.Fatalf("versions read: %v; %d refused", versions, refused)
	}
}

// openV1 opens a pack as a reader of version 1 did, from the page of
// before the checksum: codec 0, the body; codec 1, zstd frames, given to
// the zstd library whole.
func openV1(p *Pack, data []byte) ([]byte, error) {
	if len(data) < 2 || data[0] != magic || data[1] > 1 {
		return nil, errors.New("not a version-1 pack")
	}
	p.Codec, p.Version = int(data[1]), 1
	if data[1] == 0 {
		return data[2:], nil
	}
	return zdec.DecodeAll(data[2:], nil)
}

// TestVersion1ReaderReadsVersion2: a reader that knows only version 1
// (the shared peers harness's decoder is one) reads every version-2 pack
// to the same content, as zstd skips the envelope.
func TestVersion1ReaderReadsVersion2(t *testing.T) {
	n := 0
	for _, g := range vectors(t) {
		if strings.HasPrefix(g.name, "v1-") || g.refused != "" {
			continue
		}
		p, err := decode(g.subject, g.pack, openV1)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		p.Version = 2
		got, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(generic(t, got), generic(t, g.json)) {
			t.Errorf("%s: a version-1 reader reads it differently\n got %.600s\nwant %.600s", g.name, got, g.json)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("%d version-2 vectors", n)
	}
}

// TestCorruptPackRefused: a changed byte after the envelope is refused by
// the checksum, one in the envelope or header by its fixed value.
func TestCorruptPackRefused(t *testing.T) {
	for _, g := range vectors(t) {
		if strings.HasPrefix(g.name, "v1-") {
			continue
		}
		for i := 0; i < len(g.pack); i += max(1, len(g.pack)/200) {
			c := bytes.Clone(g.pack)
			c[i] ^= 0x10
			_, err := Decode(g.subject, c)
			if err == nil || i >= 15 && !errors.Is(err, ErrChecksum) {
				t.Fatalf("%s: byte %d changed: %v", g.name, i, err)
			}
		}
	}
}

// FuzzDecode: arbitrary bytes never panic the reader.
func FuzzDecode(f *testing.F) {
	for _, g := range vectors(f) {
		if len(g.pack) < 8<<10 {
			f.Add(g.subject, g.pack)
		}
	}
	f.Fuzz(func(t *testing.T, subject string, b []byte) {
		p, err := Decode(subject, b)
		if err == nil && p.Kind == kindPart && p.Commit != nil {
			t.Fatal("a part with a commit record")
		}
	})
}

// TestNoProjectImports: the reader owes nothing to the agent's code.
func TestNoProjectImports(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files here: %v", err)
	}
	for _, name := range names {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/edge-agent/") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}

// TestGoldenLayout1: the layout-1 vector (the flag vector's transaction
// as data messages and a JSON commit record) reads to its golden JSON.
func TestGoldenLayout1(t *testing.T) {
	in, err := os.ReadFile(filepath.Join(goldenDir, "layout1-flags-markers.msgs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	if err := json.Unmarshal(in, &msgs); err != nil {
		t.Fatal(err)
	}
	txn, err := DecodeLayout1(msgs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(goldenDir, "layout1-flags-markers.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(txn.Events) < 10 || !reflect.DeepEqual(generic(t, got), generic(t, want)) {
		t.Fatalf("layout 1 decodes differently\n got %.1500s\nwant %.1500s", got, want)
	}
}

// FuzzDecodeLayout1: arbitrary tokens, header values, commit records and
// payloads never panic the layout-1 reader.
func FuzzDecodeLayout1(f *testing.F) {
	f.Add("drone-1", "%telemetry/d1%20", "a=b&c", []byte("x"), []byte(`{"txn":1,"cut":{"0":1}}`))
	f.Add("k%%00", "%", "%zz", []byte{}, []byte(`{"lost":{"from":{"x":1}}}`))
	f.Fuzz(func(t *testing.T, token, writer, headers string, payload, commit []byte) {
		h := map[string][]string{"Edge-Segment": {"0"}, "Edge-Offset": {"1"}, "Edge-Event-Time": {"0"}, "Edge-Txn": {"1"},
			"Edge-Writer": {writer}, "Edge-Headers": {headers}, "Edge-Routing-Key": {writer}, "Edge-Dropped": {writer}}
		DecodeLayout1([]Message{{Subject: "edge.telemetry.a.data." + token, Headers: h, Payload: payload},
			{Subject: "edge.telemetry.a.cut", Payload: commit}})
	})
}
