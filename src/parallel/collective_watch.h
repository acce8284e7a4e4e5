// How long a rank may wait on a collective that never completes (dist.timeout), and what it was doing meanwhile:
// one per World, shared by its copies, by the communicators built on it and by their pending requests.
#pragma once

#include <string>

namespace ember {

// A wait that lasts timeout_seconds (0: no limit) ends the rank with an error naming the operation and `context`
// ("step 12"); see poll_until in parallel/collective_wait.h.
struct CollectiveWatch {
  double timeout_seconds = 0.0;
  std::string context;
  std::string hint;  // what the timeout's error tells the user to do (empty: that the whole job stops)
};

}  // namespace ember
