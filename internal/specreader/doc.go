// Package specreader is a second reader of the central format (layout-2
// packs, layout-1 messages and commit records), written from
// docs/central-format.md alone, without the agent's code: it imports no
// package of this module (TestNoProjectImports). Its tests read every
// golden vector of testdata/central-format to the JSON beside it, which
// proves the page is enough to implement a reader; where this reader and
// package wire disagree, the page is what to fix first.
package specreader
