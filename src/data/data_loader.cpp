// The DataLoader (implementation): shards are mmapped read-only and fully validated at open, so training never
// meets a bad token mid-run; a sample is found from its global index alone (Philox permutation + prefix sums).
#include "data/data_loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/philox.h"
#include "data/shard.h"

namespace ember {

namespace {

// One mmapped shard. The whole file is mapped (mmap offsets must be page-aligned, the 1 KiB header is not a page),
// and `tokens` points just past the header. Kept outside the class so the helpers below can name it;
// DataLoader::Shard (private) is this type.
struct MappedShard {
  std::string path;
  void* map = nullptr;  // nullptr: not mapped (MAP_FAILED is never stored)
  size_t map_bytes = 0;
  const void* tokens = nullptr;  // (n_tokens,) uint16 or uint32, as token_bytes says
  int token_bytes = 2;
  uint64_t n_tokens = 0;
  uint64_t n_samples = 0;
};

std::string prep_hint(const std::string& dir) {
  return "run `ember prep --input <corpus> --output " + dir + "` to create the shards";
}

// Maps one shard after read_shard_header has validated it; the size is re-checked on the open descriptor so a file
// replaced between the two opens cannot make us read past the mapping.
void map_shard(const std::string& path, MappedShard& shard) {
  const ShardInfo info = read_shard_info(path);
  const size_t n = info.tokens;
  const std::string hint = "check the file's permissions; if it is damaged, re-create the shards with `ember prep`";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error("shard " + path + ": cannot open: " + std::strerror(errno), hint);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw_error("shard " + path + ": cannot stat: " + std::strerror(e), hint);
  }
  const size_t bytes = SHARD_HEADER_BYTES + n * size_t(info.token_bytes);
  if (size_t(st.st_size) != bytes) {
    ::close(fd);
    throw_error("shard " + path + ": changed size while being opened (" + std::to_string(st.st_size) +
                    " bytes, expected " + std::to_string(bytes) + ")",
                "do not run `ember prep` on a directory that a training job is reading");
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  // The mapping keeps its own reference to the file, so the descriptor can go now.
  if (::close(fd) != 0 && map != MAP_FAILED) {
    const int e = errno;
    ::munmap(map, bytes);
    throw_error("shard " + path + ": close failed: " + std::strerror(e), hint);
  }
  if (map == MAP_FAILED)
    throw_error("shard " + path + ": mmap of " + std::to_string(bytes) + " bytes failed: " + std::strerror(map_errno),
                "check available address space and memory limits (ulimit -v)");
  shard.path = path;
  shard.map = map;
  shard.map_bytes = bytes;
  shard.tokens = static_cast<const char*>(map) + SHARD_HEADER_BYTES;
  shard.token_bytes = info.token_bytes;
  shard.n_tokens = n;
}

void unmap_shard(MappedShard& shard) {
  if (shard.map) ::munmap(shard.map, shard.map_bytes);  // cannot fail for a mapping we made; nothing to report
  shard.map = nullptr;
}

// Every token must be a row of the model's embedding table: a larger id would read past it on the first batch.
template <typename T>
void check_vocab_of(const MappedShard& s, const T* tokens, int vocab_size) {
  T max_id = 0;
  for (uint64_t i = 0; i < s.n_tokens; ++i) max_id = std::max(max_id, tokens[i]);  // vectorises; one pass
  if (uint64_t(max_id) < uint64_t(vocab_size)) return;
  uint64_t pos = 0;
  while (uint64_t(tokens[pos]) < uint64_t(vocab_size)) ++pos;
  throw_error("shard " + s.path + ": token " + std::to_string(tokens[pos]) + " at position " + std::to_string(pos) +
                  " is >= the model's vocab_size " + std::to_string(vocab_size) + " (largest token " +
                  std::to_string(max_id) + "): data vocab larger than the model's",
              "set model.vocab_size to at least " + std::to_string(uint64_t(max_id) + 1) +
                  ", or re-prep the data with the model's tokenizer (`ember prep --tokenizer ...`)");
}

void check_vocab(const MappedShard& s, int vocab_size) {
  if (s.token_bytes == 2)
    check_vocab_of(s, static_cast<const uint16_t*>(s.tokens), vocab_size);
  else
    check_vocab_of(s, static_cast<const uint32_t*>(s.tokens), vocab_size);
}

template <typename T>
void copy_sample(const T* p, int seq_len, int32_t* inputs, int32_t* targets) {
  for (int t = 0; t < seq_len; ++t) {
    inputs[t] = int32_t(p[t]);
    targets[t] = int32_t(p[t + 1]);
  }
}

}  // namespace

struct DataLoader::Shard : MappedShard {};

DataLoader::DataLoader(const std::string& dir, const std::string& split, int T, int vocab_size, uint64_t seed,
                       bool shuffle)
    : T_(T), seed_(seed), shuffle_(shuffle) {
  if (T <= 0)
    throw_error("data loader: seq_len " + std::to_string(T) + " must be positive", "set training.seq_len >= 1");
  if (vocab_size <= 0)
    throw_error("data loader: vocab_size " + std::to_string(vocab_size) + " must be positive",
                "set model.vocab_size (256 for the 'bytes' tokenizer)");
  if (split.empty() || split.find('/') != std::string::npos)
    throw_error("data loader: bad split name '" + split + "'", "use \"train\" or \"val\"");

  const std::vector<std::string> paths = list_shards(dir, split);
  if (paths.empty()) throw_error("no " + split + " shards (" + split + "*.bin) in directory " + dir, prep_hint(dir));

  // The constructor may throw half-way; the destructor would not run then, so unmap here before rethrowing.
  try {
    shard_first_sample_.push_back(0);
    for (const std::string& path : paths) {
      Shard* s = new Shard;
      shards_.push_back(s);  // owned from here on, so the catch below unmaps it even if mapping fails
      map_shard(path, *s);
      check_vocab(*s, vocab_size);
      // Sample s covers [s*T, s*T + T + 1): the last T tokens of one sample are the first of the next's targets.
      s->n_samples = s->n_tokens == 0 ? 0 : (s->n_tokens - 1) / uint64_t(T);
      if (s->n_samples == 0)
        log_warn("shard %s has %llu tokens, fewer than seq_len+1 = %d; it contributes no samples", path.c_str(),
                 (unsigned long long)s->n_tokens, T + 1);
      total_tokens_ += s->n_tokens;
      total_samples_ += s->n_samples;
      shard_first_sample_.push_back(total_samples_);
    }
    if (total_samples_ == 0)
      throw_error("the " + split + " shards in " + dir +
                      " hold no sample: every shard is shorter than seq_len+1 = " + std::to_string(T + 1) + " tokens",
                  "use a smaller training.seq_len, or prep more text (or a larger --val-fraction for the val split)");
    // The permutation stores sample ids as uint32 to halve its memory (16 GiB at the limit would be absurd anyway).
    if (shuffle_ && total_samples_ > uint64_t(UINT32_MAX))
      throw_error("the " + split + " shards in " + dir + " hold " + std::to_string(total_samples_) +
                      " samples, more than the shuffler's limit of " + std::to_string(UINT32_MAX),
                  "use a larger training.seq_len or train on a subset of the shards");
  } catch (...) {
    for (Shard* s : shards_) {
      unmap_shard(*s);
      delete s;
    }
    shards_.clear();
    throw;
  }
}

DataLoader::~DataLoader() {
  for (Shard* s : shards_) {
    unmap_shard(*s);
    delete s;
  }
}

const std::vector<uint32_t>& DataLoader::permutation(uint64_t epoch) const {
  if (perm_epoch_ == epoch) return perm_;
  // Fisher-Yates from a stream keyed by (seed, epoch) alone: recomputable anywhere, so resume needs only the cursor.
  Philox rng(seed_, 0, uint32_t(epoch), RNG_PURPOSE_DATA);
  perm_.resize(total_samples_);
  for (uint64_t i = 0; i < total_samples_; ++i) perm_[i] = uint32_t(i);
  for (uint64_t i = total_samples_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(i + 1)]);
  perm_epoch_ = epoch;
  return perm_;
}

void DataLoader::sample_tokens(uint64_t g, int32_t* inputs, int32_t* targets) const {
  const uint64_t i = g % total_samples_;
  const uint64_t sample = shuffle_ ? permutation(g / total_samples_)[i] : i;
  // The last shard whose first sample is <= sample; shards with no samples share their successor's start and are
  // skipped by upper_bound.
  const auto it = std::upper_bound(shard_first_sample_.begin(), shard_first_sample_.end(), sample);
  const size_t k = size_t(it - shard_first_sample_.begin()) - 1;
  const Shard& s = *shards_[k];
  const uint64_t first = (sample - shard_first_sample_[k]) * uint64_t(T_);
  if (s.token_bytes == 2)
    copy_sample(static_cast<const uint16_t*>(s.tokens) + first, T_, inputs, targets);
  else
    copy_sample(static_cast<const uint32_t*>(s.tokens) + first, T_, inputs, targets);
}

void DataLoader::batch_at(uint64_t g, int32_t* inputs, int32_t* targets, int B) const {
  EMBER_ASSERT(B > 0, "batch size must be positive");
  for (int b = 0; b < B; ++b)
    sample_tokens(g + uint64_t(b), inputs + size_t(b) * size_t(T_), targets + size_t(b) * size_t(T_));
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets, int B) {
  batch_at(cursor_, inputs, targets, B);
  cursor_ += uint64_t(B);
}

}  // namespace ember
