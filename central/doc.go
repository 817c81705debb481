// Package central runs the central stream store as an embedded NATS
// JetStream server (github.com/nats-io/nats-server/v2 used as a library):
// one node for a box, a demo or a test, or three nodes on one machine that
// form an R3 cluster through routes.
//
// It owns only the server's lifecycle (start, ready, shutdown, restart on
// the same ports and data) and its configuration; the layout of the data in
// it (streams EDGE_<STREAM>, subjects, headers, commit records) is owned by
// package sync.
//
//	           client port (--listen)        cluster port (--cluster-listen)
//	agents ──► [ node A ] ◄──── routes ────► [ node B ] ◄───► [ node C ]
//	           JetStream file store under --data-dir/<server name>/jetstream
//
// Clients behind proxies: with NoAdvertise the node does not tell clients
// about the other nodes' client URLs, so a client only ever uses the URLs it
// was given (the fault-injection tests rely on this).
package central
