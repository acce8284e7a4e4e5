// 1-bit codec for async mode (docs/architecture.md, "Asynchronous mode"): each value is sent as its sign, plus one
// fp32 scale per block; delta_codec.h adds the error feedback that keeps what the compression lost.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember {

// Message layout for n values in blocks of K = block_size (the last block may be shorter):
//   float   scales[ceil(n / K)]   // scale of block b = mean |x| over its actual values
//   uint8_t signs[ceil(n / 8)]    // bit i % 8 of byte i / 8 is set when x[i] >= 0 (so 0 and -0 send +scale)
// Scales come first so they stay 4-byte aligned in an aligned buffer; they are read and written with memcpy, so an
// unaligned buffer also works. Unused high bits of the last sign byte are zero, so equal inputs give equal bytes.
// A decoded value is +scale or -scale of its block. Every function accepts n == 0 (null pointers allowed then);
// block_size must be >= 1.

// Number of blocks, ceil(n / block_size).
size_t onebit_block_count(size_t n, size_t block_size);

// Bytes of a packed message: 4 * ceil(n / block_size) + ceil(n / 8).
size_t onebit_packed_bytes(size_t n, size_t block_size);

// x (n) -> out (onebit_packed_bytes(n, block_size)).
void onebit_pack(const float* x, size_t n, size_t block_size, uint8_t* out);

// in (onebit_packed_bytes(n, block_size)) -> out (n): out[i] = sign_i * scale_of_block(i).
void onebit_unpack(const uint8_t* in, size_t n, size_t block_size, float* out);

// Like onebit_unpack but out[i] += factor * sign_i * scale_of_block(i): the center folds messages into an
// accumulator, and a sender subtracts what it sent from its residual (factor -1).
void onebit_unpack_add(const uint8_t* in, size_t n, size_t block_size, float* out, float factor = 1.0f);

}  // namespace ember
