// prep.json (implementation): one small JSON object with a format name and version, checked on read.
#include "data/prep_manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"

namespace ember {

namespace {

constexpr const char* FORMAT_NAME = "ember-prep";
constexpr size_t MAX_MANIFEST_BYTES = size_t(1) << 20;

std::string manifest_path(const std::string& dir) { return (std::filesystem::path(dir) / PREP_MANIFEST_NAME).string(); }

}  // namespace

void write_prep_manifest(const std::string& dir, const PrepManifest& m) {
  nlohmann::ordered_json j = {{"format", FORMAT_NAME}, {"version", PREP_MANIFEST_VERSION}};
  j["tokenizer"] = {
      {"kind", m.tokenizer.kind}, {"fingerprint", m.tokenizer.fingerprint}, {"vocab_size", m.tokenizer.vocab_size}};
  if (m.eot_id) j["tokenizer"]["eot_id"] = *m.eot_id;
  j["token_bytes"] = m.token_bytes;
  j["input"] = m.input;
  j["input_format"] = m.format;
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  for (const auto& [name, s] : m.splits)
    splits[name] = {{"tokens", s.tokens}, {"documents", s.documents}, {"shards", s.shards}};
  j["splits"] = splits;
  write_file_atomically(manifest_path(dir), j.dump(2) + "\n", "prep manifest",
                        "check that the output directory is writable and has free space");
}

std::optional<PrepManifest> read_prep_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string hint = "re-create the shards with `ember prep --input <corpus> --output " + dir + "`";
  const std::string text = read_small_file(path, MAX_MANIFEST_BYTES, "prep manifest", hint);
  PrepManifest m;
  try {
    const nlohmann::json j = parse_json_input(text, "prep manifest " + path, hint);
    if (j.value("format", std::string()) != FORMAT_NAME)
      throw_error("prep manifest " + path + ": not an ember prep manifest (format is not \"" + FORMAT_NAME + "\")",
                  hint);
    const int version = j.at("version").get<int>();
    if (version < 1 || version > PREP_MANIFEST_VERSION)
      throw_error("prep manifest " + path + ": version " + std::to_string(version) + " is not supported (this ember " +
                      "reads up to " + std::to_string(PREP_MANIFEST_VERSION) + ")",
                  "use the ember that made these shards, or " + hint);
    const auto& t = j.at("tokenizer");
    m.tokenizer.kind = t.at("kind").get<std::string>();
    m.tokenizer.fingerprint = t.at("fingerprint").get<std::string>();
    m.tokenizer.vocab_size = t.at("vocab_size").get<int>();
    if (t.contains("eot_id")) m.eot_id = t.at("eot_id").get<int32_t>();
    m.token_bytes = j.at("token_bytes").get<int>();
    if (m.token_bytes != 2 && m.token_bytes != 4)
      throw_error("prep manifest " + path + ": token_bytes " + std::to_string(m.token_bytes) + " is neither 2 nor 4",
                  hint);
    m.input = j.value("input", std::string());
    m.format = j.value("input_format", std::string());
    for (const auto& [name, s] : j.at("splits").items())
      m.splits[name] = {s.at("tokens").get<uint64_t>(), s.at("documents").get<uint64_t>(), s.at("shards").get<int>()};
  } catch (const nlohmann::json::exception& e) {
    throw_error("prep manifest " + path + ": malformed: " + e.what(), hint);
  }
  return m;
}

}  // namespace ember
