// A MAVLink sender that is not edge-agent's code: node-mavlink (npm)
// serializes every frame. It plays N drones (system ids 1..N; drone 2
// sends MAVLink 1, the others MAVLink 2) at RATE frames/s each, over one
// TCP connection to HOST:PORT, redialling after every loss as a radio
// link would (frames made while the link is down are not sent), or with
// udp:HOST:PORT in datagrams (one a frame). Each frame written to the
// socket is logged to OUT as "<sysid> <index> <hex>".
//
//   node sender.js [udp:]HOST:PORT DRONES COUNT RATE OUT
'use strict';
const net = require('net');
const fs = require('fs');
const { MavLinkProtocolV1, MavLinkProtocolV2, minimal, common } = require('node-mavlink');

const dgram = require('dgram');
const [target, drones, count, rate, out] = process.argv.slice(2);
const udp = target.startsWith('udp:');
const addr = udp ? target.slice(4) : target;
const [host, port] = addr.split(':');
const N = Number(drones), COUNT = Number(count), RATE = Number(rate);
const log = fs.openSync(out, 'w');

let sock = null;
if (udp) {
  const u = dgram.createSocket('udp4');
  sock = { writable: true, write: (buf) => u.send(buf, Number(port), host), end: (cb) => setTimeout(() => u.close(cb), 200) }; // close drops sends still queued
} else {
  connect();
}
function connect() {
  const s = net.connect({ host, port: Number(port) });
  s.setNoDelay(true);
  s.on('connect', () => { sock = s; });
  s.on('error', () => {});
  s.on('close', () => { if (sock === s) sock = null; setTimeout(connect, 50); });
}

const state = [];
for (let d = 1; d <= N; d++) {
  state.push({
    sysid: d,
    proto: d === 2 ? new MavLinkProtocolV1(d, 1) : new MavLinkProtocolV2(d, 1),
    seq: 0, index: 0, boot: Date.now(),
  });
}

function message(st) {
  const i = st.index;
  const bootMs = Date.now() - st.boot;
  switch (i % 5) {
    case 0: {
      const m = new minimal.Heartbeat();
      m.type = 2; m.autopilot = 12; m.baseMode = 129; m.customMode = i; m.systemStatus = 4; m.mavlinkVersion = 3;
      return m;
    }
    case 1: {
      const m = new common.SystemTime();
      m.timeUnixUsec = BigInt(Date.now()) * 1000n; m.timeBootMs = bootMs;
      return m;
    }
    case 2: {
      const m = new common.GlobalPositionInt();
      m.timeBootMs = bootMs; m.lat = 473977420 + i; m.lon = 85455940 - i; m.alt = 488000; m.relativeAlt = 10000;
      m.vx = 100; m.vy = -50; m.vz = 0; m.hdg = (i * 10) % 36000;
      return m;
    }
    case 3: {
      const m = new common.Attitude();
      m.timeBootMs = bootMs; m.roll = 0.01 * (i % 7); m.pitch = -0.02; m.yaw = (i % 628) / 100;
      m.rollspeed = 0; m.pitchspeed = 0; m.yawspeed = 0.1;
      return m;
    }
    default: {
      const m = new common.VfrHud();
      m.airspeed = 12; m.groundspeed = 11.5; m.heading = i % 360; m.throttle = 40; m.alt = 488 + i; m.climb = 0.1;
      return m;
    }
  }
}

let done = 0;
const timer = setInterval(() => {
  for (const st of state) {
    if (st.index >= COUNT) continue;
    const buf = st.proto.serialize(message(st), st.seq);
    st.seq = (st.seq + 1) & 0xff;
    if (sock !== null && sock.writable) {
      sock.write(buf);
      fs.writeSync(log, `${st.sysid} ${st.index} ${buf.toString('hex')}\n`);
    }
    st.index++;
    if (st.index === COUNT) done++;
  }
  if (done === N) {
    clearInterval(timer);
    fs.closeSync(log);
    const finish = () => { console.log('done'); process.exit(0); };
    if (sock !== null) sock.end(finish); else finish();
  }
}, 1000 / RATE);
