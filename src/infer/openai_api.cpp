// The OpenAI completions API (implementation): strict field checks (a wrong type is an error naming the field,
// never a silent default) and the response objects' JSON.
#include "infer/openai_api.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace ember {

using nlohmann::json;

ApiError invalid_request(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", message, param);
}

namespace {

// Deeper nesting is no request of this API; the bound keeps a hostile body from costing more than its bytes.
constexpr int kMaxJsonDepth = 32;

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// An integer field in [lo, hi]: a JSON integer, or a float with an integral value (as JavaScript clients send 16.0).
int64_t integer_field(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e18) {
    x = int64_t(v.get<double>());
  } else {
    throw invalid_request(name, "'" + name + "' must be an integer, got " + type_name(v) + " " + v.dump());
  }
  if (x < lo || x > hi)
    throw invalid_request(name, "'" + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], got " + std::to_string(x));
  return x;
}

double number_field(const json& v, const std::string& name) {
  if (!v.is_number())
    throw invalid_request(name, "'" + name + "' must be a number, got " + type_name(v) + " " + v.dump());
  return v.get<double>();
}

bool bool_field(const json& v, const std::string& name) {
  if (!v.is_boolean())
    throw invalid_request(name, "'" + name + "' must be a boolean, got " + type_name(v) + " " + v.dump());
  return v.get<bool>();
}

bool is_token_list(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v)
    if (!t.is_number_integer() && !t.is_number_unsigned()) return false;
  return true;
}

std::vector<int32_t> token_prompt(const json& v, const Tokenizer& tokenizer, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  const int V = tokenizer.vocab_size();
  for (const json& t : v) {
    const int64_t id = integer_field(t, name, 0, std::numeric_limits<int32_t>::max());
    if (id >= V)
      throw invalid_request(name, "'" + name + "' has token id " + std::to_string(id) + ", not in the vocabulary [0, " +
                                      std::to_string(V) + ")");
    ids.push_back(int32_t(id));
  }
  return ids;
}

void parse_prompts(const json& p, const Tokenizer& tokenizer, const std::vector<int32_t>& empty_prompt,
                   const CompletionLimits& limits, CompletionRequest& r) {
  auto add_text = [&](const std::string& text) {
    r.prompts.push_back(text.empty() ? empty_prompt : tokenizer.encode(text));
  };
  if (p.is_string()) {
    add_text(p.get<std::string>());
  } else if (is_token_list(p)) {
    r.prompts.push_back(token_prompt(p, tokenizer, "prompt"));
  } else if (p.is_array() && !p.empty()) {
    if (int64_t(p.size()) > limits.max_prompts)
      throw invalid_request("prompt", "'prompt' has " + std::to_string(p.size()) + " prompts, more than the limit of " +
                                          std::to_string(limits.max_prompts));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string name = "prompt[" + std::to_string(i) + "]";
      if (p[i].is_string())
        add_text(p[i].get<std::string>());
      else if (is_token_list(p[i]))
        r.prompts.push_back(token_prompt(p[i], tokenizer, name));
      else
        throw invalid_request(
            "prompt", "'" + name + "' must be a string or a non-empty list of token ids, got " + type_name(p[i]));
    }
  } else {
    throw invalid_request("prompt", std::string("'prompt' must be a string, a list of strings or a list of token ids, "
                                                "got ") +
                                        type_name(p) + (p.is_array() ? " (empty)" : ""));
  }
  for (size_t i = 0; i < r.prompts.size(); ++i)
    if (int64_t(r.prompts[i].size()) > limits.max_T)
      throw invalid_request("prompt", "'prompt" + (r.prompts.size() > 1 ? "[" + std::to_string(i) + "]" : "") +
                                          "' has " + std::to_string(r.prompts[i].size()) +
                                          " tokens, more than the model's context of " + std::to_string(limits.max_T) +
                                          " tokens");
}

void parse_stop(const json& s, const CompletionLimits& limits, CompletionRequest& r) {
  auto add = [&](const json& v, const std::string& name) {
    if (!v.is_string()) throw invalid_request("stop", "'" + name + "' must be a string, got " + type_name(v));
    const std::string text = v.get<std::string>();
    if (text.empty()) throw invalid_request("stop", "'" + name + "' is an empty string");
    if (text.size() > limits.max_stop_bytes)
      throw invalid_request("stop",
                            "'" + name + "' is longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
    r.stop.push_back(text);
  };
  if (s.is_null()) return;
  if (s.is_string()) return add(s, "stop");
  if (!s.is_array())
    throw invalid_request("stop", std::string("'stop' must be a string or a list of strings, got ") + type_name(s));
  if (int64_t(s.size()) > limits.max_stop)
    throw invalid_request(
        "stop", "'stop' has " + std::to_string(s.size()) + " sequences, more than " + std::to_string(limits.max_stop));
  for (size_t i = 0; i < s.size(); ++i) add(s[i], "stop[" + std::to_string(i) + "]");
}

// Fields of the OpenAI API that would change the output and are not implemented: refused rather than ignored.
void refuse_unsupported(const json& body) {
  auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (present("echo") && body["echo"] != false) throw invalid_request("echo", "'echo' is not supported");
  if (present("logprobs") && body["logprobs"] != 0) throw invalid_request("logprobs", "'logprobs' is not supported");
  if (present("suffix")) throw invalid_request("suffix", "'suffix' is not supported");
  if (present("best_of") && body["best_of"] != 1 && body["best_of"] != body.value("n", json(1)))
    throw invalid_request("best_of", "'best_of' other than n is not supported");
  if (present("logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    throw invalid_request("logit_bias", "'logit_bias' is not supported");
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (present(k) && body[k] != 0) throw invalid_request(k, std::string("'") + k + "' other than 0 is not supported");
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body, const Tokenizer& tokenizer,
                                           const std::vector<int32_t>& empty_prompt, const CompletionLimits& limits) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw invalid_request("", "the body nests deeper than " + std::to_string(kMaxJsonDepth));
      return true;
    });
  } catch (const json::exception& e) {
    throw invalid_request("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw invalid_request("", std::string("the body must be a JSON object, got ") + type_name(j));
  auto get = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };

  if (const json* m = get("model")) {
    if (!m->is_string()) throw invalid_request("model", std::string("'model' must be a string, got ") + type_name(*m));
    if (m->get<std::string>() != limits.model_name)
      throw ApiError(
          404, "invalid_request_error",
          "The model '" + m->get<std::string>() + "' does not exist; this server serves '" + limits.model_name + "'",
          "model", "model_not_found");
  }
  refuse_unsupported(j);

  CompletionRequest r;
  const json* p = get("prompt");
  if (!p) throw invalid_request("prompt", "'prompt' is required");
  parse_prompts(*p, tokenizer, empty_prompt, limits, r);
  if (const json* v = get("max_tokens"))
    r.max_tokens = int(integer_field(*v, "max_tokens", 0, limits.max_tokens_limit));
  if (const json* v = get("temperature")) {
    const double t = number_field(*v, "temperature");
    if (!(t >= 0 && t <= 2)) throw invalid_request("temperature", "'temperature' must be in [0, 2], got " + v->dump());
    r.temperature = float(t);
  }
  if (const json* v = get("top_p")) {
    const double t = number_field(*v, "top_p");
    if (!(t > 0 && t <= 1)) throw invalid_request("top_p", "'top_p' must be in (0, 1], got " + v->dump());
    r.top_p = float(t);
  }
  if (const json* v = get("top_k")) r.top_k = std::max(0, int(integer_field(*v, "top_k", -1, 1 << 20)));
  if (const json* v = get("stop")) parse_stop(*v, limits, r);
  if (const json* v = get("seed")) {
    if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0))
      r.seed = v->get<uint64_t>();
    else if (v->is_number_integer())
      r.seed = uint64_t(v->get<int64_t>());  // negative seeds as two's complement, as a C client would send them
    else
      throw invalid_request("seed", std::string("'seed' must be an integer, got ") + type_name(*v) + " " + v->dump());
  }
  if (const json* v = get("n")) r.n = int(integer_field(*v, "n", 1, limits.max_n));
  if (const json* v = get("stream")) r.stream = bool_field(*v, "stream");
  if (const json* v = get("stream_options")) {
    if (!v->is_object())
      throw invalid_request("stream_options", std::string("'stream_options' must be an object, got ") + type_name(*v));
    if (!r.stream) throw invalid_request("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (v->contains("include_usage") && !(*v)["include_usage"].is_null())
      r.include_usage = bool_field((*v)["include_usage"], "stream_options.include_usage");
  }
  if (const json* v = get("user"); v && !v->is_string())
    throw invalid_request("user", std::string("'user' must be a string, got ") + type_name(*v));
  const int64_t choices = int64_t(r.prompts.size()) * r.n;
  if (choices > limits.max_choices)
    throw invalid_request("n", std::to_string(r.prompts.size()) + " prompts x n = " + std::to_string(r.n) + " is " +
                                   std::to_string(choices) + " choices, more than the limit of " +
                                   std::to_string(limits.max_choices));
  return r;
}

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_object(const CompletionUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json completion_head(const std::string& id, int64_t created, const std::string& model) {
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}};
}

json choice_object(int index, const std::string& text, const std::string& finish_reason) {
  return {{"text", text},
          {"index", index},
          {"logprobs", nullptr},
          {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
}

}  // namespace

std::string completion_json(const std::string& id, int64_t created, const std::string& model,
                            const std::vector<CompletionChoice>& choices, const CompletionUsage& usage) {
  json j = completion_head(id, created, model);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    list.push_back(choice_object(int(i), choices[i].text, choices[i].finish_reason));
  j["choices"] = std::move(list);
  j["usage"] = usage_object(usage);
  return dump(j);
}

std::string completion_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                                  const std::string& text, const std::string& finish_reason) {
  json j = completion_head(id, created, model);
  j["choices"] = json::array({choice_object(index, text, finish_reason)});
  return dump(j);
}

std::string usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                             const CompletionUsage& usage) {
  json j = completion_head(id, created, model);
  j["choices"] = json::array();
  j["usage"] = usage_object(usage);
  return dump(j);
}

namespace {

json model_object(const std::string& model, int64_t created) {
  return {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "ember"}};
}

}  // namespace

std::string model_json(const std::string& model, int64_t created) { return dump(model_object(model, created)); }

std::string models_json(const std::string& model, int64_t created) {
  return dump(json{{"object", "list"}, {"data", json::array({model_object(model, created)})}});
}

std::string error_json(const ApiError& e) {
  return dump(json{{"error",
                    {{"message", e.what()},
                     {"type", e.type},
                     {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}});
}

std::string status_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace ember
