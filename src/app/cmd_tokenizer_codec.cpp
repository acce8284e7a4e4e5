// `ember tokenizer encode` and `ember tokenizer decode`: text <-> token ids for scripts and checks. Both read all of
// stdin as raw bytes and write stdout unchanged by any newline translation.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace ember {

namespace {

std::string read_stdin() {
  std::string data;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), stdin)) > 0) data.append(buffer, n);
  if (ferror(stdin)) throw_error("cannot read stdin", "pipe the input in, e.g. ember tokenizer encode ... < file");
  return data;
}

void write_stdout(const std::string& data) {
  if (fwrite(data.data(), 1, data.size(), stdout) != data.size() || fflush(stdout) != 0)
    throw_error("cannot write stdout", "check that the output pipe or file is writable and has space");
}

}  // namespace

int cmd_tokenizer_encode(int argc, char** argv) {
  std::string spec;
  bool special = false;
  int threads = 1;
  po::options_description desc("ember tokenizer encode options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("tokenizer", po::value(&spec),
                                                  "bytes, or a BPE tokenizer's folder or file")(
      "special", po::bool_switch(&special), "special tokens written in the text (<|endoftext|>) become their ids");
  numbers.add(desc, "threads", &threads, {1, 1024}, "threads encoding pieces of the text in parallel");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember tokenizer encode --tokenizer SPEC [--special] [--threads N] < text", vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "tokenizer", "give a tokenizer, e.g. --tokenizer bytes or --tokenizer data/gpt2");
  const auto tokenizer = load_tokenizer(spec);
  const std::string text = read_stdin();
  std::vector<int32_t> ids;
  if (special)
    tokenizer->encode_with_special_into(text, ids);  // specials are cut first: one pass, not split across threads
  else if (threads > 1)
    ids = encode_parallel(*tokenizer, text, threads);
  else
    tokenizer->encode_into(text, ids);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  write_stdout(out);
  return EXIT_CODE_OK;
}

int cmd_tokenizer_decode(int argc, char** argv) {
  std::string spec;
  po::options_description desc("ember tokenizer decode options");
  desc.add_options()("help,h", "print this help")("tokenizer", po::value(&spec),
                                                  "bytes, or a BPE tokenizer's folder or file");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc, "usage: ember tokenizer decode --tokenizer SPEC < ids.json", vm))
    return EXIT_CODE_OK;
  require_option(vm, "tokenizer", "give a tokenizer, e.g. --tokenizer bytes or --tokenizer data/gpt2");
  const auto tokenizer = load_tokenizer(spec);
  const std::string hint = "give a JSON array of integer token ids on stdin, e.g. [15496, 995]";
  const nlohmann::json doc = parse_json_input(read_stdin(), "stdin", hint);
  if (!doc.is_array()) throw_error("stdin is not a JSON array", hint);
  std::vector<int32_t> ids;
  ids.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& v = doc[i];
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      throw_error(
          "element " + std::to_string(i) + " of the array on stdin (" + v.dump().substr(0, 40) + ") is not a token id",
          hint);
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  write_stdout(tokenizer->decode(ids));
  return EXIT_CODE_OK;
}

}  // namespace ember
