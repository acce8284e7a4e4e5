// The OpenAPI document (implementation), built as JSON from the same limits parse_completion_request enforces.
#include "infer/openapi.h"

#include <nlohmann/json.hpp>

namespace ember {

using nlohmann::json;

namespace {

json ref(const char* name) { return {{"$ref", std::string("#/components/schemas/") + name}}; }

json nullable(json schema) {
  schema["nullable"] = true;
  return schema;
}

json integer(int64_t lo, int64_t hi) { return {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}; }

// The fields the parser also takes as a number with no fraction (16.0, as JavaScript clients may send).
json whole_number(int64_t lo, int64_t hi) {
  return {{"type", "number"}, {"multipleOf", 1}, {"minimum", lo}, {"maximum", hi}};
}

json completion_request(const CompletionLimits& l, int vocab_size) {
  const json token_ids = {{"type", "array"}, {"minItems", 1}, {"items", integer(0, vocab_size - 1)}};
  const json stop_text = {{"type", "string"}, {"minLength", 1}, {"maxLength", l.max_stop_bytes}};
  json props = {
      {"model", nullable({{"type", "string"}, {"enum", {l.model_name}}})},
      {"prompt",
       {{"description", "text, texts, token ids or lists of token ids; each at most the model's context of " +
                            std::to_string(l.max_T) + " tokens"},
        {"oneOf",
         {{{"type", "string"}},
          {{"type", "array"}, {"minItems", 1}, {"maxItems", l.max_prompts}, {"items", {{"type", "string"}}}},
          token_ids,
          {{"type", "array"}, {"minItems", 1}, {"maxItems", l.max_prompts}, {"items", token_ids}}}}}},
      {"max_tokens", nullable(whole_number(0, l.max_tokens_limit))},
      {"temperature", nullable({{"type", "number"}, {"minimum", 0}, {"maximum", 2}})},
      {"top_p", nullable({{"type", "number"}, {"minimum", 0}, {"exclusiveMinimum", true}, {"maximum", 1}})},
      {"top_k", nullable(whole_number(-1, 1 << 20))},
      {"n", nullable(whole_number(1, l.max_n))},
      {"stream", nullable({{"type", "boolean"}})},
      {"stream_options", nullable({{"type", "object"},
                                   {"description", "only with stream: true"},
                                   {"properties", {{"include_usage", nullable({{"type", "boolean"}})}}}})},
      {"stop", nullable({{"oneOf", {stop_text, {{"type", "array"}, {"maxItems", l.max_stop}, {"items", stop_text}}}}})},
      {"seed", nullable({{"type", "integer"}})},
      {"user", nullable({{"type", "string"}})},
  };
  return {{"type", "object"}, {"required", {"prompt"}}, {"properties", props}};
}

json schemas(const CompletionLimits& l, int vocab_size) {
  const json usage = {{"type", "object"},
                      {"required", {"prompt_tokens", "completion_tokens", "total_tokens"}},
                      {"properties",
                       {{"prompt_tokens", {{"type", "integer"}}},
                        {"completion_tokens", {{"type", "integer"}}},
                        {"total_tokens", {{"type", "integer"}}}}}};
  const json choice = {
      {"type", "object"},
      {"required", {"text", "index", "logprobs", "finish_reason"}},
      {"properties",
       {{"text", {{"type", "string"}}},
        {"index", {{"type", "integer"}, {"minimum", 0}}},
        {"logprobs", {{"type", "object"}, {"nullable", true}}},
        {"finish_reason",
         {{"type", "string"}, {"nullable", true}, {"enum", {"stop", "length", "timeout", nullptr}}}}}}};
  const json model = {{"type", "object"},
                      {"required", {"id", "object", "created", "owned_by"}},
                      {"properties",
                       {{"id", {{"type", "string"}}},
                        {"object", {{"type", "string"}, {"enum", {"model"}}}},
                        {"created", {{"type", "integer"}}},
                        {"owned_by", {{"type", "string"}}}}}};
  return {
      {"CompletionRequest", completion_request(l, vocab_size)},
      {"Usage", usage},
      {"Choice", choice},
      {"Completion",
       {{"type", "object"},
        {"required", {"id", "object", "created", "model", "choices", "usage"}},
        {"properties",
         {{"id", {{"type", "string"}}},
          {"object", {{"type", "string"}, {"enum", {"text_completion"}}}},
          {"created", {{"type", "integer"}}},
          {"model", {{"type", "string"}}},
          {"choices", {{"type", "array"}, {"items", ref("Choice")}}},
          {"usage", ref("Usage")}}}}},
      {"Model", model},
      {"ModelList",
       {{"type", "object"},
        {"required", {"object", "data"}},
        {"properties",
         {{"object", {{"type", "string"}, {"enum", {"list"}}}},
          {"data", {{"type", "array"}, {"items", ref("Model")}}}}}}},
      {"Health",
       {{"type", "object"},
        {"required",
         {"status", "max_batch", "queued", "running", "steps", "prompt_tokens", "generated_tokens",
          "requests_finished"}},
        {"properties",
         {{"status", {{"type", "string"}, {"enum", {"ok", "shutting_down"}}}},
          {"max_batch", {{"type", "integer"}}},
          {"queued", {{"type", "integer"}}},
          {"running", {{"type", "integer"}}},
          {"steps", {{"type", "integer"}}},
          {"prompt_tokens", {{"type", "integer"}}},
          {"generated_tokens", {{"type", "integer"}}},
          {"requests_finished", {{"type", "integer"}}}}}}},
      {"Error",
       {{"type", "object"},
        {"required", {"error"}},
        {"properties",
         {{"error",
           {{"type", "object"},
            {"required", {"message", "type", "param", "code"}},
            {"properties",
             {{"message", {{"type", "string"}}},
              {"type", {{"type", "string"}}},
              {"param", {{"type", "string"}, {"nullable", true}}},
              {"code", {{"type", "string"}, {"nullable", true}}}}}}}}}}},
      {"OpenAPI", {{"type", "object"}, {"required", {"openapi", "paths"}}}},
      // One server-sent event of a stream (the schema of a text/event-stream entry describes each event).
      {"StreamEvent",
       {{"type", "object"},
        {"required", {"data"}},
        {"properties",
         {{"event", {{"type", "string"}}},
          {"data",
           {{"type", "string"},
            {"description",
             "a Completion chunk as JSON (choices with one choice's new text, or the usage), an "
             "Error, or the last event: [DONE]"}}}}}}},
  };
}

json json_content(const char* schema) { return {{"application/json", {{"schema", ref(schema)}}}}; }

// The error responses every route may give, beside its own.
json responses(json own, std::initializer_list<int> errors) {
  static const std::map<int, const char*> kWhy = {
      {400, "a malformed request or a bad field (error.param names it)"},
      {401, "no API key, or another (with --api-key)"},
      {404, "no such route or model"},
      {405, "another method than the route's"},
      {408, "the request did not arrive in time"},
      {411, "a body without a declared length"},
      {413, "a body over the server's limit"},
      {429, "the queue is full; retry later"},
      {431, "a header over the server's limit"},
      {503, "shutting down, or too many connections"},
  };
  for (int status : errors)
    own[std::to_string(status)] = {{"description", kWhy.at(status)}, {"content", json_content("Error")}};
  return own;
}

}  // namespace

std::string openapi_json(const CompletionLimits& limits, int vocab_size, bool api_key) {
  const auto common = {400, 401, 404, 405, 408, 411, 413, 431, 503};
  auto get = [&](const char* summary, const char* schema) {
    json op = {{"summary", summary},
               {"responses", responses({{"200", {{"description", "OK"}, {"content", json_content(schema)}}}}, common)}};
    return op;
  };
  json completion_ok = {
      {"description", "the completion; with stream: true, server-sent events of Completion chunks, then data: [DONE]"},
      {"content",
       {{"application/json", {{"schema", ref("Completion")}}},
        {"text/event-stream", {{"schema", ref("StreamEvent")}}}}}};
  json paths = {
      {"/v1/completions",
       {{"post",
         {{"summary", "create a completion"},
          {"requestBody", {{"required", true}, {"content", json_content("CompletionRequest")}}},
          {"responses", responses({{"200", completion_ok}}, {400, 401, 404, 405, 408, 411, 413, 429, 431, 503})}}}}},
      {"/v1/models", {{"get", get("the one model served", "ModelList")}}},
      {"/v1/models/{model}",
       {{"get", get("one model", "Model")},
        {"parameters", {{{"name", "model"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}}}}}},
      {"/health", {{"get", get("the engine's state; 503 while shutting down", "Health")}}},
      {"/openapi.json", {{"get", get("this document", "OpenAPI")}}},
  };
  // /health answers 503 with its own body while shutting down.
  paths["/health"]["get"]["responses"]["503"] = {{"description", "shutting down"}, {"content", json_content("Health")}};
  paths["/health"]["get"]["responses"].erase("401");
  json doc = {{"openapi", "3.0.3"},
              {"info",
               {{"title", "ember serve"},
                {"version", "1"},
                {"description", "The OpenAI completions API for one model (" + limits.model_name + ")"}}},
              {"paths", paths},
              {"components", {{"schemas", schemas(limits, vocab_size)}}}};
  if (api_key) {
    doc["components"]["securitySchemes"] = {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}};
    doc["security"] = json::array({{{"bearer", json::array()}}});
    paths["/health"]["get"]["security"] = json::array();
    doc["paths"]["/health"]["get"]["security"] = json::array();
  }
  return doc.dump();
}

}  // namespace ember
