package flight

import (
	"io"

	"github.com/klauspost/compress/zstd"
)

// chunkCompressor compresses a record's chunks for the MCAP writer
// (mcap.ResettableWriteCloser): it gathers a chunk's records as the
// writer sends them and, when the writer closes the chunk, writes one
// zstd frame of them into the writer's chunk buffer.
//
// Its zstd encoder is set for what a record holds, most of it video
// access units that their codec already compressed:
//
//   - no entropy coding of literals: Huffman-coding the literals of an
//     access unit gains nothing and cost as much as the match search
//     (the test flight's chunks: half the CPU, 0.3 % more bytes;
//     docs/benchmarks/flight.md); the matches that shrink JSON and
//     MAVLink are kept;
//   - no zstd checksum: the chunk record carries a CRC-32 of the same
//     uncompressed bytes (IncludeCRC), which every MCAP reader checks.
//
// Encoding a chunk in one call (EncodeAll) rather than through the
// encoder's stream also writes the writer's buffer once per chunk:
// streamed, it grew from empty by doubling in every record.
type chunkCompressor struct {
	enc *zstd.Encoder
	raw []byte    // the chunk being gathered (kept between chunks)
	out []byte    // the chunk's frame (kept between chunks)
	w   io.Writer // the writer's chunk buffer
}

func newChunkCompressor() (*chunkCompressor, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithNoEntropyCompression(true), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, err
	}
	return &chunkCompressor{enc: enc}, nil
}

// Write gathers p into the chunk.
func (c *chunkCompressor) Write(p []byte) (int, error) {
	c.raw = append(c.raw, p...)
	return len(p), nil
}

// Close compresses the chunk gathered into the writer's buffer.
func (c *chunkCompressor) Close() error {
	c.out = c.enc.EncodeAll(c.raw, c.out[:0])
	c.raw = c.raw[:0]
	_, err := c.w.Write(c.out)
	return err
}

// Reset starts a chunk that Close writes to w.
func (c *chunkCompressor) Reset(w io.Writer) {
	c.w = w
	c.raw = c.raw[:0]
}

// chunkCompressors keep compressors between records: a new encoder costs
// megabytes of tables to allocate and clear, as much as a short flight's
// compression, and the buffers grow to a chunk once. A small free list,
// not a sync.Pool: a pool is emptied by every garbage collection, and an
// export collects many times. A record is written by one goroutine.
var chunkCompressors = make(chan *chunkCompressor, 4)

func getChunkCompressor() (*chunkCompressor, error) {
	select {
	case c := <-chunkCompressors:
		return c, nil
	default:
		return newChunkCompressor()
	}
}

// putChunkCompressor returns c to the free list; buffers grown past a
// chunk's usual size by one large access unit are dropped with it.
func putChunkCompressor(c *chunkCompressor) {
	if cap(c.raw) > 4*chunkSize || cap(c.out) > 4*chunkSize {
		return
	}
	c.w = nil
	select {
	case chunkCompressors <- c:
	default:
	}
}
