// A tlog reader that is not edge-agent's code: node-mavlink's (npm)
// MavLinkTLogPacketSplitter splits FILE into its entries and checks each
// frame's checksum with its message's CRC_EXTRA; MavLinkPacketParser reads
// each frame's header. One line per frame:
// "<time ms> <sysid> <msgid> <hex of the frame>", then a last line
// "valid N invalid N unknown N".
//
//   node tlogread.js FILE
'use strict';
const fs = require('fs');
const { MavLinkTLogPacketSplitter, MavLinkPacketParser } = require('node-mavlink');

const splitter = new MavLinkTLogPacketSplitter();
const out = [];
fs.createReadStream(process.argv[2])
  .pipe(splitter)
  .pipe(new MavLinkPacketParser())
  .on('data', (p) => {
    out.push(`${p.header.timestamp} ${p.header.sysid} ${p.header.msgid} ${p.buffer.toString('hex')}`);
  })
  .on('end', () => {
    out.push(`valid ${splitter.validPackages} invalid ${splitter.invalidPackages} unknown ${splitter.unknownPackagesCount}`);
    process.stdout.write(out.join('\n') + '\n');
  })
  .on('error', (e) => { console.error(e); process.exit(1); });
