// Rotary position embeddings (RoPE), the rotate-half form of GPT-NeoX and Llama: a head's pairs (d, d + HS/2) are
// rotated by the angle pos * theta^(-2d/HS). The angles' cosines and sines come from one table, computed in double
// and rounded once, which every backend reads, so a rotation is the same few fp32 operations everywhere.
#pragma once

#include <cstddef>

namespace ember {

// cos and sin of positions pos0 .. pos0 + count - 1, each a row of half = HS/2 values: (count, half) each.
void rope_table(float theta, int half, long pos0, int count, float* cos, float* sin);

// One head's row rotated in place by its position's row of the table (x: HS = 2 * half values):
// (x_d, x_{d+half}) -> (x_d c - x_{d+half} s, x_{d+half} c + x_d s). Two products and a sum each, unfused.
inline void rope_rotate(float* x, const float* cos, const float* sin, int half) {
  for (int d = 0; d < half; ++d) {
    const float a = x[d], b = x[d + half];
    x[d] = a * cos[d] - b * sin[d];
    x[d + half] = b * cos[d] + a * sin[d];
  }
}

// The transpose of rope_rotate (its inverse up to rounding), which carries a gradient back through the rotation:
// (g_d, g_{d+half}) -> (g_d c + g_{d+half} s, g_{d+half} c - g_d s).
inline void rope_rotate_back(float* g, const float* cos, const float* sin, int half) {
  for (int d = 0; d < half; ++d) {
    const float a = g[d], b = g[d + half];
    g[d] = a * cos[d] + b * sin[d];
    g[d + half] = b * cos[d] - a * sin[d];
  }
}

}  // namespace ember
