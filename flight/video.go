package flight

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Video is written as foxglove.CompressedVideo in protobuf encoding: the
// access unit's bytes as they are (JSON needs them in base64, a third
// more to hash, compress and check). The schema is the FileDescriptorSet
// of foxglove/CompressedVideo.proto and google/protobuf/timestamp.proto,
// as Foxglove's own protobuf schemas are published:
//
//	message CompressedVideo {
//	  google.protobuf.Timestamp timestamp = 1;
//	  string frame_id = 2;
//	  bytes data = 3;
//	  string format = 4;
//	}
const (
	videoSchemaName = "foxglove.CompressedVideo"
	encProtobuf     = "protobuf"
)

// Field numbers of foxglove.CompressedVideo and google.protobuf.Timestamp.
const (
	videoTimestamp protowire.Number = 1
	videoFrameID   protowire.Number = 2
	videoData      protowire.Number = 3
	videoFormat    protowire.Number = 4
	stampSeconds   protowire.Number = 1
	stampNanos     protowire.Number = 2
)

// CompressedVideoSchema returns the schema data of the video channels: a
// serialized google.protobuf.FileDescriptorSet.
var CompressedVideoSchema = sync.OnceValue(func() []byte {
	str := func(s string) *string { return &s }
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: str(name), Number: &n, Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: str(jsonName(name))}
		if typeName != "" {
			f.TypeName = str(typeName)
		}
		return f
	}
	video := &descriptorpb.FileDescriptorProto{
		Name: str("foxglove/CompressedVideo.proto"), Package: str("foxglove"), Syntax: str("proto3"),
		Dependency: []string{"google/protobuf/timestamp.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: str("CompressedVideo"), Field: []*descriptorpb.FieldDescriptorProto{
			field("timestamp", int32(videoTimestamp), descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Timestamp"),
			field("frame_id", int32(videoFrameID), descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
			field("data", int32(videoData), descriptorpb.FieldDescriptorProto_TYPE_BYTES, ""),
			field("format", int32(videoFormat), descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
		}}},
	}
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(timestamppb.File_google_protobuf_timestamp_proto), video}}
	if _, err := protodesc.NewFiles(set); err != nil {
		panic(fmt.Sprintf("flight: the CompressedVideo schema: %v", err)) // a programming error
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		panic(fmt.Sprintf("flight: the CompressedVideo schema: %v", err))
	}
	return b
})

// jsonName is protoc's JSON name of a field (frame_id: frameId).
func jsonName(s string) string {
	var b []byte
	up := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '_':
			up = true
		case up && 'a' <= c && c <= 'z':
			b, up = append(b, c-'a'+'A'), false
		default:
			b, up = append(b, c), false
		}
	}
	return string(b)
}

// appendVideo appends one access unit as a CompressedVideo message.
// Fields in number order; proto3 defaults (zero, empty) left out, as
// protobuf encoders do.
func appendVideo(b []byte, pts int64, frameID string, data []byte, format string) []byte {
	st := stampOf(pts)
	var ts []byte
	var tsBuf [24]byte
	ts = tsBuf[:0]
	if st.Sec != 0 {
		ts = protowire.AppendTag(ts, stampSeconds, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(st.Sec))
	}
	if st.Nsec != 0 {
		ts = protowire.AppendTag(ts, stampNanos, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(int32(st.Nsec)))
	}
	b = protowire.AppendTag(b, videoTimestamp, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	if frameID != "" {
		b = protowire.AppendTag(b, videoFrameID, protowire.BytesType)
		b = protowire.AppendString(b, frameID)
	}
	if len(data) > 0 {
		b = protowire.AppendTag(b, videoData, protowire.BytesType)
		b = protowire.AppendBytes(b, data)
	}
	if format != "" {
		b = protowire.AppendTag(b, videoFormat, protowire.BytesType)
		b = protowire.AppendString(b, format)
	}
	return b
}

// videoMessage is a CompressedVideo message decoded (Data aliases the
// message's bytes).
type videoMessage struct {
	Sec     int64
	Nsec    int32
	FrameID string
	Data    []byte
	Format  string
}

var errVideo = errors.New("not a protobuf CompressedVideo")

// decodeVideo decodes a CompressedVideo message (untrusted bytes:
// FuzzVerify). Unknown fields are skipped; a repeated field's last value
// wins, as protobuf's.
func decodeVideo(b []byte) (videoMessage, error) {
	var v videoMessage
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return v, fmt.Errorf("%w: %v", errVideo, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == videoTimestamp && typ == protowire.BytesType:
			ts, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return v, fmt.Errorf("%w: timestamp: %v", errVideo, protowire.ParseError(n))
			}
			if err := decodeStamp(ts, &v); err != nil {
				return v, err
			}
			b = b[n:]
			continue
		case (num == videoFrameID || num == videoData || num == videoFormat) && typ == protowire.BytesType:
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return v, fmt.Errorf("%w: field %d: %v", errVideo, num, protowire.ParseError(n))
			}
			switch num {
			case videoFrameID:
				v.FrameID = string(p)
			case videoData:
				v.Data = p
			default:
				v.Format = string(p)
			}
			b = b[n:]
			continue
		case num == videoTimestamp || num == videoFrameID || num == videoData || num == videoFormat:
			return v, fmt.Errorf("%w: field %d has wire type %d", errVideo, num, typ)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return v, fmt.Errorf("%w: field %d: %v", errVideo, num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return v, nil
}

func decodeStamp(b []byte, v *videoMessage) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: timestamp: %v", errVideo, protowire.ParseError(n))
		}
		b = b[n:]
		if (num == stampSeconds || num == stampNanos) && typ == protowire.VarintType {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("%w: timestamp: %v", errVideo, protowire.ParseError(n))
			}
			if num == stampSeconds {
				v.Sec = int64(x)
			} else {
				v.Nsec = int32(x)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("%w: timestamp: %v", errVideo, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}
