// Package mqttwire holds what the telemetry package's broker client and
// its MQTT listener share on the wire: a buffered connection that
// coalesces writes (BufferedConn), a bounded MQTT 3.1.1 packet reader
// (ReadPacket, UnpackPublish), the four-byte PUBACK (AppendPubAck) and the
// per-connection ack order (AckOrder).
package mqttwire
