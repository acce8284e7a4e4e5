// The OpenAI completions API as `serve` speaks it, without HTTP: a request body parsed and checked into a typed
// request (every bad field an ApiError naming it), and the JSON of responses, stream chunks and errors.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ember {

// An error as the API reports it: an HTTP status and the body {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_type, const std::string& message, std::string error_param = "",
           std::string error_code = "")
      : std::runtime_error(message),
        status(http_status),
        type(std::move(error_type)),
        param(std::move(error_param)),
        code(std::move(error_code)) {}
  int status;
  std::string type;   // "invalid_request_error", "not_found_error", "rate_limit_error", ...
  std::string param;  // the request field at fault ("" when none: null in JSON)
  std::string code;   // a machine-readable code ("" when none: null in JSON)
};

// A 400 invalid_request_error naming `param`.
ApiError invalid_request(const std::string& param, const std::string& message);

// What a completion request may ask for, set by the server's options and the model.
struct CompletionLimits {
  std::string model_name;       // the one model served; another name is 404 model_not_found
  int max_T = 0;                // the model's context (block_size): a longer prompt is refused
  int max_tokens_limit = 4096;  // max_tokens above this is refused
  int max_n = 16;               // choices per prompt
  int max_prompts = 64;         // prompts in one request
  int max_choices = 64;         // prompts x n
  int max_stop = 4;             // stop sequences, as OpenAI allows
  size_t max_stop_bytes = 256;  // bytes of one stop sequence
};

struct CompletionRequest {
  std::vector<std::vector<int32_t>> prompts;  // each 1 to max_T token ids
  int max_tokens = 16;                        // OpenAI's default
  float temperature = 1.0f;                   // [0, 2]; 0: greedy
  float top_p = 1.0f;                         // (0, 1]
  int top_k = 0;                              // 0: all tokens (-1 in the request means the same)
  std::vector<std::string> stop;              // up to max_stop non-empty strings
  std::optional<uint64_t> seed;               // none: the server draws one
  int n = 1;                                  // choices per prompt; choice i of prompt p has index p * n + i
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage before [DONE]
};

// Parses and checks a POST /v1/completions body. Prompts are encoded with `tokenizer` (a string, a list of strings,
// a list of token ids or a list of such lists); an empty string is `empty_prompt` (the start of a document). Throws
// ApiError (400 for a malformed body or a bad field, 404 for another model's name).
CompletionRequest parse_completion_request(const std::string& body, const Tokenizer& tokenizer,
                                           const std::vector<int32_t>& empty_prompt, const CompletionLimits& limits);

// One finished choice of a completion.
struct CompletionChoice {
  std::string text;
  std::string finish_reason;  // "stop", "length" or "timeout"
};

struct CompletionUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// The JSON texts of the API's objects. Text that is not UTF-8 (a character cut by max_tokens) is written with
// U+FFFD in its place, so every body is valid JSON.
std::string completion_json(const std::string& id, int64_t created, const std::string& model,
                            const std::vector<CompletionChoice>& choices, const CompletionUsage& usage);
// One stream chunk: text for choice `index`, with finish_reason null until its last chunk.
std::string completion_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                                  const std::string& text, const std::string& finish_reason);
// The stream's usage chunk (choices empty), sent before [DONE] when include_usage.
std::string usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                             const CompletionUsage& usage);
std::string model_json(const std::string& model, int64_t created);   // one model object
std::string models_json(const std::string& model, int64_t created);  // the list of the one model
std::string error_json(const ApiError& e);

// The error type of an HTTP status the server answers without a more specific one ("not_found_error", ...).
std::string status_error_type(int status);

}  // namespace ember
