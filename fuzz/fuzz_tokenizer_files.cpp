// Fuzz targets: the BPE tokenizer file readers, one executable each (EMBER_FUZZ_FILES: 0 vocab.json + merges.txt,
// 1 tokenizer.json, 2 a .tiktoken file). A file set that reads must give a tokenizer for which decode(encode(text))
// == text, whose ids are in its vocabulary, and whose chunk_boundary cuts where encoding the halves changes
// nothing, for the text the input ends with. Input: FILE <split> [MERGES <split>] TEXT.
#include <cstdint>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int kind = EMBER_FUZZ_FILES;
  std::vector<std::string> parts = fuzz::split_input(data, size, kind == 0 ? 3 : 2);
  TokenizerFiles files;
  if (kind == 0) {
    files["vocab.json"] = parts[0];
    files["merges.txt"] = parts[1];
  } else if (kind == 1) {
    files["tokenizer.json"] = parts[0];
  } else {
    files["fuzz.tiktoken"] = parts[0];
  }
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = bpe_tokenizer_from_files(files, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  const std::string& text = parts.back();
  std::vector<int32_t> ids = tok->encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size()) fuzz::broken("encode gave an id outside the vocabulary");
  if (tok->decode(ids) != text) fuzz::broken("decode(encode(text)) != text");
  const size_t cut = tok->chunk_boundary(text, text.size() / 2);
  if (cut > text.size()) fuzz::broken("chunk_boundary past the end");
  std::vector<int32_t> halves = tok->encode(std::string_view(text).substr(0, cut));
  tok->encode_into(std::string_view(text).substr(cut), halves);
  if (halves != ids) fuzz::broken("encoding the halves at chunk_boundary differs from the whole");
  return 0;
}
