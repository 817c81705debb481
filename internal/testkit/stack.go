package testkit

// GrowStack grows the calling goroutine's stack (by depth × 16 KiB, depth
// < 16 KiB) before a benchmark's measured loop: a stack that grows inside
// the counted function is copied elsewhere, and callgrind, which follows
// calls by the stack pointer, may then lose that function's return and
// count on past it (bench/callgrind-count.sh counts the function alone).
// The collector, off under callgrind, would shrink it again.
//
//go:noinline
func GrowStack(depth int) byte {
	var pad [16 << 10]byte
	pad[depth] = byte(depth)
	if depth > 0 {
		return GrowStack(depth-1) + pad[depth]
	}
	return pad[0]
}
