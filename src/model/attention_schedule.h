// The model's attention schedule as configured: the position encoding's names, the per-layer window and ALiBi lists
// in their text form ("full,64,1" / "0,0.5"), and the named presets that fill them for any depth:
//   tscale: the first ~15% of the layers see the previous token only (window 1); the rest alternate, ending on the
//           last layer, a window of 64 with an ALiBi slope of 0.5 and full attention with none (TScale's layout);
//   sssl:   short, short, short, long repeated, the last layer long: short is a window of half the block size, long
//           full attention (nanochat's default pattern).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace ember {

inline constexpr PositionEncoding kPositionEncodings[] = {PositionEncoding::learned, PositionEncoding::rope};
const char* position_encoding_name(PositionEncoding p);  // "learned" or "rope"
std::optional<PositionEncoding> parse_position_encoding(const std::string& name);

// Reads model.attention_windows: "full", a preset name, or n_layer comma-separated entries, each "full" or a positive
// integer (one entry stands for every layer). Sets *windows (empty when every layer is full) and, for a preset with
// slopes, *preset_slopes (else leaves it empty). Returns "" or what the text must be.
std::string parse_attention_windows(const std::string& text, int n_layer, int block_size, std::vector<int>* windows,
                                    std::vector<float>* preset_slopes);
// Reads model.alibi_slopes: n_layer comma-separated non-negative numbers (one stands for every layer). Sets *slopes
// (empty when all are zero). Returns "" or what the text must be.
std::string parse_alibi_slopes(const std::string& text, int n_layer, std::vector<float>* slopes);

// The text forms, which the parsers read back to the same lists: "full" for an empty window list, "" for no slopes.
std::string format_attention_windows(const std::vector<int>& windows);
std::string format_alibi_slopes(const std::vector<float>& slopes);

// The whole schedule in one line, for logs and `ember inspect`: "learned positions, full attention" or
// "rope (theta 500000), windows full,64,1, ALiBi slopes 0,0.5,0".
std::string describe_attention(const ModelConfig& model);

// Where rotary positions cannot run (an odd head size): what position = rope needs, or "" where it can or is not set.
std::string rope_problem(const ModelConfig& model);
// Where a schedule cannot run: rope_problem, or lists of the wrong length. "" when it can.
std::string attention_schedule_problem(const ModelConfig& model);

}  // namespace ember
