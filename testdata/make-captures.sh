#!/usr/bin/env bash
# Re-creates the video captures in this directory. Needs ffmpeg (with libx264
# and libx265), ffprobe, tcpdump and socat, and root (tcpdump on loopback).
# Not run by the tests: its outputs are committed. See README.md.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# capture NAME RTPPORT ES FMT: stream the elementary stream ES (ffmpeg demuxer
# FMT) in real time to 127.0.0.1:RTPPORT (RTCP on RTPPORT+1) with ffmpeg's RTP
# muxer, while tcpdump records loopback into NAME.pcap.
capture() {
  local name=$1 port=$2 es=$3 fmt=$4 rtcp=$(( $2 + 1 ))
  socat -u UDP-RECV:$port /dev/null & local s1=$!
  socat -u UDP-RECV:$rtcp /dev/null & local s2=$!
  tcpdump -i lo -U -w "$name.pcap" "udp and (port $port or port $rtcp)" 2>"$tmp/$name.tcpdump.log" & local t=$!
  sleep 1
  ffmpeg -hide_banner -loglevel error -re -framerate 30 -f "$fmt" -i "$es" -map 0:v -c copy \
    -f rtp -sdp_file "$name.sdp" "rtp://127.0.0.1:$port?rtcpport=$rtcp&pkt_size=1200"
  sleep 1
  kill $t; wait $t || true
  kill $s1 $s2; wait $s1 $s2 2>/dev/null || true
  cat "$tmp/$name.tcpdump.log"
}

# frames ES FMT OUT: the encoder's own view of its frames, one line per frame:
# "index,keyframe(0/1),size" from ffprobe over the elementary stream.
frames() {
  ffprobe -v error -framerate 30 -f "$2" -i "$1" -select_streams v -show_packets \
    -show_entries packet=flags,size -of csv=p=0 |
    awk -F, '{k = (substr($2,1,1)=="K") ? 1 : 0; print NR-1 "," k "," $1}' > "$3"
}

# H.264: 6 s of testsrc2 640x360@30, libx264, IDR every 30 frames (1 s), no
# B-frames, no scene-cut keyframes, ~1.8 Mbit/s.
ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=size=640x360:rate=30 -t 6 \
  -c:v libx264 -preset veryfast -g 30 -keyint_min 30 -sc_threshold 0 -bf 0 \
  -b:v 1800k -maxrate 1800k -bufsize 900k -threads 1 -f h264 "$tmp/h264.es"
frames "$tmp/h264.es" h264 h264.frames.csv
capture h264 5004 "$tmp/h264.es" h264

# H.265: same source, libx265, closed GOP, IDR every 30 frames, no B-frames, ~1 Mbit/s.
ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=size=640x360:rate=30 -t 6 \
  -c:v libx265 -preset veryfast -b:v 1000k \
  -x265-params "keyint=30:min-keyint=30:scenecut=0:bframes=0:open-gop=0:pools=1:frame-threads=1:log-level=error" \
  -f hevc "$tmp/h265.es"
frames "$tmp/h265.es" hevc h265.frames.csv
capture h265 5008 "$tmp/h265.es" hevc

sha256sum "$tmp/h264.es" "$tmp/h265.es" | sed "s#$tmp/##" > es.sha256
ls -l h264.pcap h265.pcap
