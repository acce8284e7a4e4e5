// AdamW over the parameter arena, or over one ZeRO-1 shard of it: fp32 first and second moments for the arena range
// [shard_begin, shard_end), weight decay on the table rows marked for it (matrices), clipping by global L2 norm.
// With training.offload = optimizer (train/offload.h) the moments and an fp32 master copy of the shard's weights live
// in host memory, and each update runs there, chunk by chunk: the gradients to the host, the CPU backend's AdamW on
// the masters and moments, the new weights back into the backend's arena, the copies of one chunk running beside the
// host's update of another (Backend::copy_to_host_async); or, handed off stage by stage (begin_handoff), each stage's
// gradients to the host as backward finishes them. The numbers are the CPU backend's either way, so on the CPU
// backend a run with and without offload gives the same bits.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/device_weights.h"
#include "model/param_table.h"
#include "train/offload.h"
#include "train/run_config.h"

namespace ember {

class AdamW {
 public:
  // Owns moments for the arena elements [shard_begin, shard_end) (the whole arena without ZeRO-1).
  // handoff: offloaded, the step may be handed off stage by stage (begin_handoff), which takes host memory for the
  // whole shard's gradients instead of two chunks' (offload_host_bytes).
  // device (offloaded, a model built with host masters: GPT::device_weights): the model has no fp32 arena, and each
  // updated range goes back as the bf16 copy (cast on the host) and the packed fp32 tensors, or where the dense
  // weights' bf16 copy stays on the host (device.bf16 null: host_bf16()) as the packed tensors in fp32 and bf16; the
  // params given to the steps are then null. The weights are set from the host (weights_loaded), never read from the
  // device.
  AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config, size_t shard_begin, size_t shard_end,
        Offload offload = Offload::none, bool handoff = false, DeviceWeights device = {});
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate lr of params[shard_begin, shard_end) (params is the whole arena) from
  // shard_grads times grad_scale (clip_scale's factor), whose element 0 is arena element shard_begin. The gradients
  // are read, not changed. Increments the step used for bias correction. Offloaded, the masters are first read from
  // params where they are stale (at the first step, and after params_changed).
  void step(float* params, const float* shard_grads, float lr, float grad_scale = 1.0f);
  // The weights in the arena were set from outside the optimizer (a load): the offloaded masters follow at the next
  // step. Nothing to do without offload.
  void params_changed() { masters_stale_ = true; }
  // The weights were set from a host arena (arena element 0 first): offloaded, the masters take the shard's from it
  // (with device weights, the only way they are set; and the host's bf16 copy). Nothing to do without offload.
  void weights_loaded(const float* host_arena);
  // With device weights: the host's bf16 copy of the shard's weights (page-locked; element 0 is arena element
  // shard_begin), current after each step and load: what a model whose dense weights' copy stays on the host reads.
  const BFloat16* host_bf16() const { return host_bf16_; }

  // The step handed off stage by stage during backward (constructed with handoff; for gradients that nothing reduces
  // between backward and the update: one rank, or an async worker). begin_handoff, before the last micro-batch's
  // backward, arms the step of params from grads (both the whole arena) at lr; hand_off(begin, end), from the backward
  // hook, sends arena range [begin, end), final now, to the host behind the backend's ops enqueued so far; step()
  // with the same arrays, once every element was handed off, finishes the update. A host thread receives the ranges
  // and updates each as it arrives where grad_scale is given (no clipping: the update runs beside backward), else once
  // step() brings the scale; each range's new weights go back as soon as it is updated.
  void begin_handoff(float* params, const float* grads, float lr, std::optional<float> grad_scale);
  void hand_off(size_t begin, size_t end);
  bool handoff_enabled() const { return handoff_ != nullptr; }

  size_t shard_begin() const { return begin_; }
  size_t shard_end() const { return end_; }
  bool offloaded() const { return offload_ == Offload::optimizer; }
  // (shard_end - shard_begin) values each: backend memory, or host memory when offloaded (moments_on_host).
  float* exp_avg() { return m_; }
  float* exp_avg_sq() { return v_; }
  bool moments_on_host() const { return offloaded() || backend_.host_addressable(); }
  // Offloaded: the fp32 master weights of the shard in host memory (element 0 is arena element shard_begin), read
  // from params (the whole arena) first where they are stale: what a checkpoint writes without a device copy.
  const float* host_masters(const float* params) {
    refresh_masters(params);
    return host_masters_;
  }
  // Sets both moments from host arrays of (shard_end - shard_begin) values; read_moments copies them into such arrays.
  void load_moments(const float* m, const float* v);
  void read_moments(float* m, float* v) const;
  int step_count() const { return t_; }
  void set_step_count(int t) { t_ = t; }
  // What an offloaded optimizer keeps on the host: masters, moments and the gradients' staging (two chunks, or with
  // handoff the whole shard); with device weights, the staging of the bf16 copy and of the shard's packed elements (in
  // fp32, and where the device takes them in bf16 too: WeightHome::host_dense).
  struct HostShard {
    size_t numel = 0;  // the shard's elements
    bool handoff = false;
    WeightHome home = WeightHome::device;
    size_t packed = 0;  // the shard's packed elements (home not device)
  };
  static size_t offload_host_bytes(const HostShard& shard);
  size_t host_bytes() const;  // what this one holds there (0 without offload)

 private:
  struct Handoff;  // train/adamw_handoff.cpp
  void offloaded_step(float* params, const float* shard_grads, float lr, float grad_scale);
  void finish_handoff(const float* params, const float* grads, float lr, float grad_scale);
  void stop_handoff() noexcept;  // ends the host thread of a step that did not finish (an error)
  void run_handoff();            // the host thread
  // The host's update of shard elements [c0, c1) from host gradients g (element c0's first), the segments cut to it.
  void update_on_host(size_t c0, size_t c1, const float* g, float lr, float grad_scale);
  // Reads the masters from the backend's weights where they are stale.
  void refresh_masters(const float* params);
  // Sends shard elements [c0, c1) of the masters to the backend (into params, or as device_ takes them), appending
  // the copies' tickets (two at most) to `copies`.
  void send_weights(float* params, size_t c0, size_t c1, std::deque<Backend::CopyTicket>& copies);

  Backend& backend_;
  const ParamTable& table_;
  OptimizerConfig config_;
  size_t begin_, end_;
  Offload offload_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
  std::vector<AdamWSegment> segments_;  // the shard's table rows, relative to begin_, merged where decay agrees
  std::vector<AdamWSegment> cut_;       // update_on_host's segments cut to a range, kept for the next
  // Offloaded: the CPU backend that runs the update on the host, and the host's masters and gradient staging
  // (m_ and v_ are host memory too), from backend_.alloc_host.
  std::unique_ptr<Backend> host_;
  float* host_masters_ = nullptr;
  float* host_grads_ = nullptr;
  bool masters_stale_ = true;
  // With device weights: where they go, and the host's staging of what goes there (the shard's bf16 copy; its packed
  // elements, packed_begin_ the first).
  DeviceWeights device_;
  BFloat16* host_bf16_ = nullptr;
  float* host_packed_ = nullptr;
  BFloat16* host_packed_bf16_ = nullptr;  // where device_.packed_bf16 is
  size_t packed_begin_ = 0, packed_end_ = 0;
  std::unique_ptr<Handoff> handoff_;  // constructed with handoff (and offloaded)
};

// Whether training with `config` on `world_size` ranks (an async run: each worker) hands the offloaded optimizer's
// step off stage by stage: an offloaded run whose gradients nothing reduces between backward and the update.
bool offload_hands_off(const RunConfig& config, int world_size);

// Where training with `config` at `precision` keeps the weights (model/device_weights.h): on the host only, the device
// holding the bf16 copy and the packed fp32 tensors (GPT's host masters), in an offloaded sync run where the model
// has that copy; else on the device. Async workers keep the fp32 arena on the device, where each round's exchange
// rebases the weights.
// host_dense where the products quantize their weights (int8, fp8) and each rank updates the whole arena (no ZeRO-1:
// the host then has the whole bf16 copy).
WeightHome offload_weight_home(const RunConfig& config, MatmulPrecision precision);

// The factor that scales gradients of global norm `norm` to max_norm, when max_norm > 0 and norm exceeds it; else 1.
float clip_scale(float norm, float max_norm);

}  // namespace ember
