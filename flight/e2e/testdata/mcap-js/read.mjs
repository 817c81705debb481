// An independent reader of a flight record (edge-agent export flight):
// Foxglove's own MCAP library for JavaScript, as Foxglove Studio reads
// files. Usage: node read.mjs FILE.mcap OUTDIR
// It prints one JSON document: the summary (channels, schemas, message
// counts, attachments, metadata) as the indexed reader sees it, and per
// channel the messages read in file order by the streaming reader, with
// whether their log times are monotone; each /video/* channel's access
// units are written to OUTDIR/<drone>.<format> (Annex B) for ffprobe.
// Protobuf messages are decoded as Foxglove Studio decodes them: protobufjs
// loads the schema's FileDescriptorSet and looks up the schema's name.
import { open } from "node:fs/promises";
import { readFileSync, writeFileSync } from "node:fs";
import { McapIndexedReader, McapStreamReader } from "@mcap/core";
import { decompress } from "fzstd";
import protobuf from "protobufjs";
import descriptor from "protobufjs/ext/descriptor/index.js";

const [file, outDir] = process.argv.slice(2);
const decompressHandlers = { zstd: (buf, size) => decompress(buf, new Uint8Array(Number(size))) };

const fh = await open(file, "r");
const { size } = await fh.stat();
const readable = {
  size: async () => BigInt(size),
  read: async (offset, length) => {
    const buf = new Uint8Array(Number(length));
    await fh.read(buf, 0, Number(length), Number(offset));
    return buf;
  },
};
const indexed = await McapIndexedReader.Initialize({ readable, decompressHandlers });
const out = { channels: {}, schemas: {}, indexed_counts: {}, attachments: [], metadata: [], stream: {} };
for (const [id, ch] of indexed.channelsById) {
  const schema = indexed.schemasById.get(ch.schemaId);
  out.channels[ch.topic] = { encoding: ch.messageEncoding, schema: schema ? schema.name : "", schema_encoding: schema ? schema.encoding : "" };
  out.indexed_counts[ch.topic] = Number(indexed.statistics.channelMessageCounts.get(id) ?? 0n);
}
for (const a of indexed.attachmentIndexes) out.attachments.push(a.name);
for (const m of indexed.metadataIndexes) out.metadata.push(m.name);
// The indexed reader in log-time order: every message is reachable by the index.
let viaIndex = 0;
for await (const _ of indexed.readMessages()) viaIndex++;
out.indexed_messages = viaIndex;
await fh.close();

// The streaming reader in file order, every CRC checked.
const reader = new McapStreamReader({ decompressHandlers, validateCrcs: true });
reader.append(readFileSync(file));
const byId = {};
const schemas = {};
const video = {};
// protobufType is a protobuf schema's message type, as Foxglove Studio
// builds it from the FileDescriptorSet.
function protobufType(schema) {
  const root = protobuf.Root.fromDescriptor(descriptor.FileDescriptorSet.decode(schema.data));
  return root.lookupType(schema.name);
}
for (let rec; (rec = reader.nextRecord()); ) {
  if (rec.type === "Schema") schemas[rec.id] = rec;
  if (rec.type === "Channel") {
    byId[rec.id] = rec;
    if (rec.messageEncoding === "protobuf") rec.type_ = protobufType(schemas[rec.schemaId]);
  }
  if (rec.type !== "Message") continue;
  const ch = byId[rec.channelId];
  const s = (out.stream[ch.topic] ??= { messages: 0, log_monotone: true, last: -1n, bytes: 0 });
  s.messages++;
  s.bytes += rec.data.length;
  if (rec.logTime < s.last) s.log_monotone = false;
  s.last = rec.logTime;
  if (ch.topic.startsWith("/video/")) {
    const m = ch.type_.toObject(ch.type_.decode(rec.data), { longs: String });
    const key = ch.topic.slice("/video/".length) + "." + m.format;
    if ((m.frame_id ?? m.frameId) !== ch.topic.slice("/video/".length) || m.timestamp === undefined) {
      throw new Error(`${ch.topic}: message ${JSON.stringify({ ...m, data: undefined })}`);
    }
    (video[key] ??= []).push(Buffer.from(m.data));
  }
}
for (const s of Object.values(out.stream)) s.last = s.last.toString();
out.video_files = [];
for (const [name, parts] of Object.entries(video)) {
  const path = `${outDir}/${name}`;
  writeFileSync(path, Buffer.concat(parts));
  out.video_files.push({ path, access_units: parts.length });
}
console.log(JSON.stringify(out));
