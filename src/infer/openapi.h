// The OpenAPI 3.0 document `ember serve` answers at GET /openapi.json: its routes, the request body of a completion
// with the limits this server enforces, and the shape of every response, errors included, so a client generator or
// a schema-driven tester can rely on it.
#pragma once

#include <string>

#include "infer/openai_api.h"

namespace ember {

// `vocab_size` bounds token-id prompts; `api_key` adds the bearer scheme to every route but /health.
std::string openapi_json(const CompletionLimits& limits, int vocab_size, bool api_key);

}  // namespace ember
