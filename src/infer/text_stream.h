// Token ids to text as a sequence grows, for streaming: text is released only once it is whole UTF-8 (a byte-level
// token may end inside a character) and cannot be the start of a stop sequence; a stop sequence ends the text
// before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ember {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);
  // Adds a token; returns the text released by it (possibly empty). After a stop sequence appears, stopped() is true
  // and the text before it has been released.
  std::string push(int32_t token);
  bool stopped() const { return stopped_; }
  // At the end of the sequence: the text still held back (an incomplete character's bytes are released as they are).
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded, not yet released
  bool stopped_ = false;
};

}  // namespace ember
