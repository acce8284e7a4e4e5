// The op interface (implementation): the memory accounting every backend shares.
#include "backend/backend.h"

#include <algorithm>

#include "core/error.h"

namespace ember {

void Backend::track_alloc(const void* ptr, size_t bytes) {
  if (!ptr) return;
  EMBER_ASSERT(live_.emplace(ptr, bytes).second, "backend memory accounting: a pointer was allocated twice");
  allocated_ += bytes;
  peak_ = std::max(peak_, allocated_);
}

void Backend::track_free(const void* ptr) {
  if (!ptr) return;
  const auto it = live_.find(ptr);
  EMBER_ASSERT(it != live_.end(), "backend memory accounting: freeing a pointer this backend did not allocate");
  allocated_ -= it->second;
  live_.erase(it);
}

}  // namespace ember
