// Package thirdparty_test guards the patched copies of Badger and
// ristretto in this directory (README.md): go.mod must replace the
// releases with them, each copy must carry its patch, and the Badger patch
// must keep a compaction's keys when a new table cannot be created. A
// version bump that drops a replace or a patch fails here, without root
// (the tmpfs tests in localstream that found the bugs need root).
//
// This package does not import localstream, so ristretto's z.Allocate is
// nil here until a test sets it.
package thirdparty_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"
)

// patched is each copy: its module path, its directory here, and a line
// of its patch that the release does not have, in the file that holds it.
var patched = []struct {
	module, dir, file, line, marker string
}{
	{"github.com/dgraph-io/badger/v4", "badger", "levels.go",
		"defer func() { inflightBuilders.Done(err) }()", badger.EdgeAgentPatch},
	{"github.com/dgraph-io/ristretto/v2", "ristretto", "z/file.go",
		"if writable && Allocate != nil {", z.EdgeAgentPatch},
}

// TestReplaces: the go command resolves each module to its copy here, at
// the version third_party/README.md says the copy was taken from, and the
// copy still carries its patch (and not the released line it replaced).
func TestReplaces(t *testing.T) {
	args := []string{"list", "-m", "-json"}
	for _, p := range patched {
		args = append(args, p.module)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	type module struct {
		Path, Version string
		Replace       *struct{ Path, Dir string }
	}
	mods := map[string]module{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var m module
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		mods[m.Path] = m
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patched {
		m := mods[p.module]
		want := "./third_party/" + p.dir
		if m.Replace == nil || m.Replace.Path != want || m.Replace.Dir != filepath.Join(here, p.dir) {
			t.Errorf("%s %s is not replaced by %s (go.mod: replace %s %s => %s): %+v",
				p.module, m.Version, want, p.module, m.Version, want, m.Replace)
			continue
		}
		heading := regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(p.dir) + ` — ` + regexp.QuoteMeta(p.module) + ` (v\S+), patched$`)
		if h := heading.FindSubmatch(readme); h == nil || string(h[1]) != m.Version {
			t.Errorf("go.mod wants %s %s but README.md's copy of it is %q: copy the new release into %s and re-apply the patch",
				p.module, m.Version, h, p.dir)
		}
		src, err := os.ReadFile(filepath.Join(p.dir, p.file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(src, []byte(p.line)) {
			t.Errorf("%s/%s lacks the patch's line %q (README.md has the diff)", p.dir, p.file, p.line)
		}
		if !strings.Contains(p.marker, m.Version) {
			t.Errorf("%s: the patch marker %q names another version than %s", p.module, p.marker, m.Version)
		}
	}
	if src, err := os.ReadFile(filepath.Join("badger", "levels.go")); err == nil &&
		bytes.Contains(src, []byte("defer inflightBuilders.Done(err)")) {
		t.Error("badger/levels.go has the released subcompact's `defer inflightBuilders.Done(err)` again")
	}
}

// TestCompactionKeepsKeysWhenATableCannotBeCreated is the Badger patch's
// case without a full tmpfs: ristretto's z.Allocate (the other patch)
// refuses every new table while Flatten compacts two levels into one.
// Released Badger's subcompact drops the refused table's error, finishes
// the compaction without it and deletes the tables it read, so keys are
// lost; the patched one fails the compaction and keeps them.
func TestCompactionKeepsKeysWhenATableCannotBeCreated(t *testing.T) {
	dir := t.TempDir()
	open := func(compactOnClose bool) *badger.DB {
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).
			WithNumCompactors(0).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10).WithCompactL0OnClose(compactOnClose))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	keys := 0
	write := func(db *badger.DB, n int) {
		wb := db.NewWriteBatch()
		for range n {
			k := make([]byte, 8)
			binary.BigEndian.PutUint64(k, uint64(keys))
			if err := wb.Set(k, bytes.Repeat(k, 32)); err != nil {
				t.Fatal(err)
			}
			keys++
		}
		if err := wb.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Tables on two levels: the first batch compacted below level 0 at
	// close, the second left at level 0.
	db := open(true)
	write(db, 5000)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(false)
	write(db, 5000)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(false)
	defer db.Close()
	levels := map[int]int{}
	for _, ti := range db.Tables() {
		levels[ti.Level]++
	}
	if len(levels) < 2 {
		t.Fatalf("tables by level %v: the test needs two levels for Flatten to compact", levels)
	}

	var refused atomic.Int64
	errNoBlocks := errors.New("no blocks for a new table (test)")
	z.Allocate = func(fd *os.File, off, size int64) error {
		if off == 0 && strings.HasSuffix(fd.Name(), ".sst") {
			refused.Add(1)
			os.Remove(fd.Name())
			return fmt.Errorf("%w: %s", errNoBlocks, filepath.Base(fd.Name()))
		}
		return nil
	}
	err := db.Flatten(1)
	z.Allocate = nil
	t.Logf("tables by level %v; Flatten with every new table refused (%d refused): error %t", levels, refused.Load(), err != nil)
	if refused.Load() == 0 {
		t.Fatal("Flatten created no table: z.Allocate was not called (is the ristretto patch compiled in?)")
	}
	if err == nil {
		t.Error("Flatten succeeded though no table it built could be created: subcompact lost the error")
	}
	missing := 0
	if err := db.View(func(txn *badger.Txn) error {
		for i := range keys {
			k := make([]byte, 8)
			binary.BigEndian.PutUint64(k, uint64(i))
			if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
				missing++
			} else if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if missing > 0 {
		t.Fatalf("%d of %d keys lost by the failed compaction", missing, keys)
	}
	// Once tables can be created again the compaction runs.
	if err := db.Flatten(1); err != nil {
		t.Fatalf("Flatten once tables can be created: %v", err)
	}
}
