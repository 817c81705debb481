// A stock consumer of the derived streams: the npm nats client's ordered
// consumers, nothing of edge-agent.
// Usage: node consume.mjs URL STREAM[,STREAM...] [SPEC]
// STREAM is EDGEEV_TELEMETRY, or with partitions every one of them
// (EDGEEV_TELEMETRY_P0,EDGEEV_TELEMETRY_P1,...): one ordered consumer
// each, read side by side. It prints one JSON line per message (stream,
// stream sequence, subject, headers, payload, and with partitions the
// partition of the subject's agent token by the hash of docs/unpack.md,
// computed here) as it arrives; with SPEC
// (docs/central-format.md), each line also lists in "unknown" the
// headers that the spec's derived-message table does not name. When
// stdin gives a number N, it stops once it has N messages in all and has
// seen nothing more for 1.5 s (a duplicate would arrive then), and exits.
import { connect } from "nats";
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";

const [url, streamList, spec] = process.argv.slice(2);
const streams = streamList.split(",");

// The header names of the table under "### Derived messages": every
// `Name` in the first cell of a row.
const table = new Set();
if (spec) {
  const doc = readFileSync(spec, "utf8");
  const section = doc.slice(doc.indexOf("### Derived messages")).split("\n### ")[0];
  for (const line of section.split("\n")) {
    if (!line.startsWith("| `")) continue;
    for (const m of line.split("|")[1].matchAll(/`([A-Za-z-]+)`/g)) table.add(m[1]);
  }
  if (table.size < 20) throw new Error(`${spec}: the derived-message table names ${table.size} headers`);
}
const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
const jsm = await nc.jetstreamManager();
const js = nc.jetstream();

let expected = -1;
let count = 0;
let quiet = null;
let stopped = false;
const running = [];
const stopWhenDone = () => {
  if (expected < 0 || count < expected) return;
  clearTimeout(quiet);
  quiet = setTimeout(() => {
    stopped = true;
    for (const m of running) m.stop();
  }, 1500);
};
createInterface({ input: process.stdin }).on("line", (l) => {
  expected = Number(l);
  stopWhenDone();
});

// The partition of an agent token of n: FNV-1a 32-bit of its bytes mod n
// (docs/unpack.md, "Partitions").
const fnv1a = (s) => {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(s)) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
};
const partitionOf = (subject) => {
  const t = subject.split(".");
  return t.length === 5 ? fnv1a(t[3]) % streams.length : 0;
};

const td = new TextDecoder();
// consume reads one stream, once it exists (a partition's stream is
// made when its first event arrives).
const consume = async (stream) => {
  for (;;) {
    try {
      await jsm.streams.info(stream);
      break;
    } catch {
      if (stopped) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  if (stopped) return;
  const consumer = await js.consumers.get(stream); // an ordered consumer
  const messages = await consumer.consume();
  running.push(messages);
  for await (const m of messages) {
    const headers = {};
    if (m.headers) for (const k of m.headers.keys()) headers[k] = m.headers.get(k);
    const unknown = spec ? Object.keys(headers).filter((k) => !table.has(k)) : [];
    console.log(JSON.stringify({ stream, seq: m.seq, subject: m.subject, partition: partitionOf(m.subject), headers, unknown, data: td.decode(m.data) }));
    count++;
    stopWhenDone();
  }
};
await Promise.all(streams.map(consume));
await nc.close();
process.exit(0);
