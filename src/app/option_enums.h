// The closed sets of values of the config keys: for each enum, every enumerator, its name and the module's parser,
// so that each option's value is parsed once (app/options.cpp) and rendered by the same name.
#pragma once

#include <optional>
#include <string>

#include "model/attention_schedule.h"
#include "train/run_config.h"

namespace ember {

template <class E>
struct EnumOption;
template <>
struct EnumOption<TrainingMode> {
  static constexpr TrainingMode values[] = {TrainingMode::sync, TrainingMode::async};
  static std::string name(TrainingMode v) { return training_mode_name(v); }
  static std::optional<TrainingMode> parse(const std::string& s) { return parse_training_mode(s); }
};
template <>
struct EnumOption<DeviceRequest> {
  static constexpr const auto& values = kDeviceRequests;
  static std::string name(DeviceRequest v) { return device_request_name(v); }
  static std::optional<DeviceRequest> parse(const std::string& s) { return parse_device_request(s); }
};
template <>
struct EnumOption<CommRequest> {
  static constexpr const auto& values = kCommRequests;
  static std::string name(CommRequest v) { return comm_request_name(v); }
  static std::optional<CommRequest> parse(const std::string& s) { return parse_comm_request(s); }
};
template <>
struct EnumOption<Recompute> {
  static constexpr const auto& values = kRecomputes;
  static std::string name(Recompute v) { return recompute_name(v); }
  static std::optional<Recompute> parse(const std::string& s) { return parse_recompute(s); }
};
template <>
struct EnumOption<Offload> {
  static constexpr const auto& values = kOffloads;
  static std::string name(Offload v) { return offload_name(v); }
  static std::optional<Offload> parse(const std::string& s) { return parse_offload(s); }
};
template <>
struct EnumOption<PositionEncoding> {
  static constexpr const auto& values = kPositionEncodings;
  static std::string name(PositionEncoding v) { return position_encoding_name(v); }
  static std::optional<PositionEncoding> parse(const std::string& s) { return parse_position_encoding(s); }
};
template <>
struct EnumOption<DeltaCompression> {
  static constexpr const auto& values = kDeltaCompressions;
  static std::string name(DeltaCompression v) { return delta_compression_name(v); }
  static std::optional<DeltaCompression> parse(const std::string& s) { return parse_delta_compression(s); }
};
template <>
struct EnumOption<PrecisionRequest> {
  static constexpr const auto& values = kPrecisionRequests;
  static std::string name(PrecisionRequest v) { return precision_request_name(v); }
  static std::optional<PrecisionRequest> parse(const std::string& s) { return parse_precision_request(s); }
};

template <class E>
concept EnumOptionType = requires(E v) {
  EnumOption<E>::name(v);
};

}  // namespace ember
