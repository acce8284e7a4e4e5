// The prep pipeline (implementation): one mutex guards a bounded input queue and a reorder map; encoders take pieces
// only inside a window ahead of the consumer, so results never pile up behind a slow writer.
#include "data/prep_pipeline.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/jsonl_line.h"

namespace ember {

namespace {

// Bad JSONL lines quoted in warnings; the rest are only counted.
constexpr size_t MAX_BAD_MESSAGES = 3;

struct Cancelled {};  // unwinds the reader when the consumer has stopped

template <typename T>
void store_tokens(const std::vector<int32_t>& ids, std::vector<char>& out, int vocab, const CorpusPiece& p) {
  out.resize(ids.size() * sizeof(T));
  T* dst = reinterpret_cast<T*>(out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      throw_error("prep input " + *p.file + ": the tokenizer produced id " + std::to_string(ids[i]) +
                      " outside its vocabulary of " + std::to_string(vocab),
                  "the tokenizer files are inconsistent; check them or use another tokenizer");
    dst[i] = T(ids[i]);
  }
}

EncodedPiece encode_piece(const CorpusPiece& p, const Tokenizer& tok, const PipelineOptions& opt,
                          std::vector<int32_t>& ids) {
  EncodedPiece out;
  out.split = p.split;
  out.disk_done = p.disk_done;
  ids.clear();
  const std::optional<int32_t> eot = tok.eot_id();
  if (!p.jsonl) {
    if (p.doc_start) {
      out.documents = 1;
      if (eot) ids.push_back(*eot);
    }
    tok.encode_into(p.text, ids);
  } else {
    for_each_jsonl_document(
        p.text, opt.reader.jsonl_field, *p.file, p.first_line, "prep", opt.skip_bad_lines,
        [&](std::string&& doc) {
          ++out.documents;
          if (eot) ids.push_back(*eot);
          tok.encode_into(doc, ids);
        },
        [&](const Error& e) {
          ++out.bad_lines;
          if (out.bad_messages.size() < MAX_BAD_MESSAGES) out.bad_messages.push_back(e.what());
        });
  }
  out.n_tokens = ids.size();
  if (opt.token_bytes == 2)
    store_tokens<uint16_t>(ids, out.tokens, tok.vocab_size(), p);
  else
    store_tokens<uint32_t>(ids, out.tokens, tok.vocab_size(), p);
  return out;
}

struct Slot {
  EncodedPiece piece;
  std::exception_ptr error;
};

class Pipeline {
 public:
  Pipeline(const Tokenizer& tok, const PipelineOptions& opt)
      : tok_(tok), opt_(opt), window_(size_t(opt.threads) + 2), input_cap_(2) {}

  void run(const CorpusPlan& plan, const std::function<void(EncodedPiece&&)>& consume) {
    std::vector<std::thread> threads;
    threads.emplace_back([&] { read(plan); });
    for (int i = 0; i < opt_.threads; ++i) threads.emplace_back([&] { encode(); });
    std::exception_ptr failure;
    try {
      write(consume);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }

 private:
  void read(const CorpusPlan& plan) {
    try {
      read_corpus(plan, tok_, opt_.reader, [&](CorpusPiece&& piece) {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || input_.size() < input_cap_; });
        if (stop_) throw Cancelled{};
        input_.emplace_back(next_seq_++, std::move(piece));
        cv_.notify_all();
      });
    } catch (const Cancelled&) {
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      reader_error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(m_);
    reader_done_ = true;
    cv_.notify_all();
  }

  void encode() {
    std::vector<int32_t> ids;  // reused: grows to one piece's tokens once per thread
    for (;;) {
      std::pair<uint64_t, CorpusPiece> item;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] {
          return stop_ || (input_.empty() && reader_done_) ||
                 (!input_.empty() && input_.front().first < next_write_ + window_);
        });
        if (stop_ || input_.empty()) return;
        item = std::move(input_.front());
        input_.pop_front();
        cv_.notify_all();
      }
      Slot slot;
      try {
        slot.piece = encode_piece(item.second, tok_, opt_, ids);
      } catch (...) {
        slot.error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(m_);
      results_.emplace(item.first, std::move(slot));
      cv_.notify_all();
    }
  }

  void write(const std::function<void(EncodedPiece&&)>& consume) {
    for (;;) {
      Slot slot;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return results_.count(next_write_) > 0 || (reader_done_ && next_write_ == next_seq_); });
        auto it = results_.find(next_write_);
        if (it == results_.end()) {  // every piece consumed
          if (reader_error_) std::rethrow_exception(reader_error_);
          return;
        }
        slot = std::move(it->second);
        results_.erase(it);
      }
      if (slot.error) std::rethrow_exception(slot.error);
      consume(std::move(slot.piece));
      std::lock_guard<std::mutex> lock(m_);
      ++next_write_;
      cv_.notify_all();
    }
  }

  const Tokenizer& tok_;
  const PipelineOptions& opt_;
  const size_t window_;     // pieces taken by encoders but not yet consumed, at most
  const size_t input_cap_;  // pieces cut by the reader but not yet taken, at most
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, CorpusPiece>> input_;
  std::map<uint64_t, Slot> results_;
  uint64_t next_seq_ = 0, next_write_ = 0;
  bool reader_done_ = false, stop_ = false;
  std::exception_ptr reader_error_;
};

}  // namespace

void run_prep_pipeline(const CorpusPlan& plan, const Tokenizer& tok, const PipelineOptions& options,
                       const std::function<void(EncodedPiece&&)>& consume) {
  Pipeline(tok, options).run(plan, consume);
}

}  // namespace ember
