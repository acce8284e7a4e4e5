// The OpenAI completions API without HTTP: request bodies parsed into typed requests (defaults, every prompt form,
// sampling fields), every kind of bad field refused with its status and the field named, and the JSON shapes of
// responses, stream chunks, model lists and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

using nlohmann::json;

const ByteTokenizer kBytes;
const std::vector<int32_t> kEmpty = {'\n'};

CompletionLimits limits() {
  CompletionLimits l;
  l.model_name = "tiny";
  l.max_T = 32;
  l.max_tokens_limit = 100;
  l.max_n = 4;
  l.max_prompts = 8;
  l.max_choices = 10;
  return l;
}

CompletionRequest parse(const std::string& body) { return parse_completion_request(body, kBytes, kEmpty, limits()); }

// The error a body gets: its status and the param it names ("" when none).
std::pair<int, std::string> error_of(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {0, "accepted"};
}

TEST(OpenAiApi, DefaultsFollowOpenAi) {
  const CompletionRequest r = parse(R"({"model": "tiny", "prompt": "ab"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_TRUE(r.stop.empty());
  // model may be left out: the one model served.
  EXPECT_NO_THROW(parse(R"({"prompt": "ab"})"));
}

TEST(OpenAiApi, EveryPromptForm) {
  EXPECT_EQ(parse(R"({"prompt": ["ab", "c"]})").prompts, (std::vector<std::vector<int32_t>>{{'a', 'b'}, {'c'}}));
  EXPECT_EQ(parse(R"({"prompt": [1, 2, 3]})").prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse(R"({"prompt": [[1, 2], [3]]})").prompts, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_EQ(parse(R"({"prompt": ["a", [7]]})").prompts, (std::vector<std::vector<int32_t>>{{'a'}, {7}}));
  // An empty prompt is the start of a document.
  EXPECT_EQ(parse(R"({"prompt": ""})").prompts, (std::vector<std::vector<int32_t>>{kEmpty}));
  // Exactly the context is accepted, one more token is not.
  EXPECT_NO_THROW(parse(json{{"prompt", std::string(32, 'x')}}.dump()));
  EXPECT_EQ(error_of(json{{"prompt", std::string(33, 'x')}}.dump()), std::make_pair(400, std::string("prompt")));
}

TEST(OpenAiApi, SamplingFields) {
  const CompletionRequest r = parse(
      R"({"prompt": "a", "max_tokens": 100, "temperature": 0, "top_p": 0.5, "top_k": 40, "stop": ["x", "yz"],
          "seed": 7, "n": 2, "stream": true, "stream_options": {"include_usage": true}, "user": "u"})");
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.top_p, 0.5f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(parse(R"({"prompt": "a", "stop": "\n"})").stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(parse(R"({"prompt": "a", "top_k": -1})").top_k, 0);
  EXPECT_EQ(parse(R"({"prompt": "a", "max_tokens": 16.0})").max_tokens, 16);
  EXPECT_EQ(parse(R"({"prompt": "a", "max_tokens": null})").max_tokens, 16);
  EXPECT_EQ(parse(R"({"prompt": "a", "max_tokens": 0})").max_tokens, 0);
}

TEST(OpenAiApi, BadRequestsNameTheirField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "a", "max_tokens": "abc"})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 101})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1e30})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "a", "temperature": -1})", "temperature"},
      {R"({"prompt": "a", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "top_p": 0})", "top_p"},
      {R"({"prompt": "a", "top_p": 1.01})", "top_p"},
      {R"({"prompt": "a", "top_k": -2})", "top_k"},
      {R"({"prompt": "a", "stop": 3})", "stop"},
      {R"({"prompt": "a", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"prompt": "a", "stop": [""]})", "stop"},
      {R"({"prompt": "a", "seed": "x"})", "seed"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "n": 0})", "n"},
      {R"({"prompt": "a", "n": 5})", "n"},
      {R"({"prompt": ["a", "b", "c"], "n": 4})", "n"},  // 12 choices, more than 10
      {R"({"prompt": "a", "stream": "yes"})", "stream"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "a", "model": 3})", "model"},
      {R"({"prompt": "a", "echo": true})", "echo"},
      {R"({"prompt": "a", "logprobs": 2})", "logprobs"},
      {R"({"prompt": "a", "presence_penalty": 0.5})", "presence_penalty"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": [256]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]})", "prompt"},
      {R"({"max_tokens": 3})", "prompt"},
  };
  for (const auto& [body, param] : cases) EXPECT_EQ(error_of(body), std::make_pair(400, param)) << body;
}

TEST(OpenAiApi, MalformedBodiesAndOtherModels) {
  for (const std::string body : {"", "{", "not json", "[1, 2]", "\"text\"", "{\"prompt\": \"a\",}"})
    EXPECT_EQ(error_of(body), std::make_pair(400, std::string())) << body;
  // Deep nesting is refused before it costs more than its bytes.
  EXPECT_EQ(error_of(std::string(100000, '[') + std::string(100000, ']')).first, 400);
  EXPECT_EQ(error_of(R"({"prompt": "\xff"})").first, 400);  // not UTF-8
  try {
    parse(R"({"model": "gpt-4", "prompt": "a"})");
    FAIL() << "another model's name was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_NE(std::string(e.what()).find("gpt-4"), std::string::npos);
  }
}

TEST(OpenAiApi, ResponseShapes) {
  const json c = json::parse(completion_json("cmpl-1", 123, "tiny", {{"ab", "stop"}, {"c\xff", "length"}}, {3, 4}));
  EXPECT_EQ(c["id"], "cmpl-1");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["created"], 123);
  EXPECT_EQ(c["model"], "tiny");
  ASSERT_EQ(c["choices"].size(), 2u);
  EXPECT_EQ(c["choices"][0], (json{{"text", "ab"}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", "stop"}}));
  EXPECT_EQ(c["choices"][1]["text"], "c\xef\xbf\xbd");  // a cut character becomes U+FFFD
  EXPECT_EQ(c["choices"][1]["index"], 1);
  EXPECT_EQ(c["usage"], (json{{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}));

  const json k = json::parse(completion_chunk_json("cmpl-1", 123, "tiny", 2, "x", ""));
  EXPECT_EQ(k["object"], "text_completion");
  EXPECT_EQ(k["choices"][0], (json{{"text", "x"}, {"index", 2}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
  EXPECT_FALSE(k.contains("usage"));
  const json u = json::parse(usage_chunk_json("cmpl-1", 123, "tiny", {1, 2}));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 3);

  const json m = json::parse(models_json("tiny", 5));
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");

  const json e = json::parse(error_json(invalid_request("top_p", "'top_p' must be in (0, 1]")));
  EXPECT_EQ(e, (json{{"error",
                      {{"message", "'top_p' must be in (0, 1]"},
                       {"type", "invalid_request_error"},
                       {"param", "top_p"},
                       {"code", nullptr}}}}));
}

}  // namespace
}  // namespace ember
