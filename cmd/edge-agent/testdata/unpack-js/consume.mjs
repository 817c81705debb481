// A stock consumer of the derived stream: the npm nats client's ordered
// consumer, nothing of edge-agent. Usage: node consume.mjs URL STREAM
// It prints one JSON line per message (stream sequence, subject, headers,
// payload) as it arrives. When stdin gives a number N, it stops once it
// has N messages and has seen nothing more for 1.5 s (a duplicate would
// arrive then), and exits.
import { connect } from "nats";
import { createInterface } from "node:readline";

const [url, stream] = process.argv.slice(2);
const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
const jsm = await nc.jetstreamManager();
for (;;) {
  try {
    await jsm.streams.info(stream);
    break;
  } catch {
    await new Promise((r) => setTimeout(r, 100));
  }
}
const js = nc.jetstream();
const consumer = await js.consumers.get(stream); // an ordered consumer
const messages = await consumer.consume();

let expected = -1;
let count = 0;
let quiet = null;
const stopWhenDone = () => {
  if (expected < 0 || count < expected) return;
  clearTimeout(quiet);
  quiet = setTimeout(() => messages.stop(), 1500);
};
createInterface({ input: process.stdin }).on("line", (l) => {
  expected = Number(l);
  stopWhenDone();
});

const td = new TextDecoder();
for await (const m of messages) {
  const headers = {};
  if (m.headers) for (const k of m.headers.keys()) headers[k] = m.headers.get(k);
  console.log(JSON.stringify({ seq: m.seq, subject: m.subject, headers, data: td.decode(m.data) }));
  count++;
  stopWhenDone();
}
await nc.close();
process.exit(0);
