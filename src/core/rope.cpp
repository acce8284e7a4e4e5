// Rotary position embeddings (implementation): the table of angles.
#include "core/rope.h"

#include <cmath>

namespace ember {

void rope_table(float theta, int half, long pos0, int count, float* cos, float* sin) {
  for (int d = 0; d < half; ++d) {
    const double inv_freq = std::pow(double(theta), -double(d) / double(half));  // theta^(-2d/HS)
    for (int t = 0; t < count; ++t) {
      const double angle = double(pos0 + t) * inv_freq;
      cos[size_t(t) * half + d] = float(std::cos(angle));
      sin[size_t(t) * half + d] = float(std::sin(angle));
    }
  }
}

}  // namespace ember
