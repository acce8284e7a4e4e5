// The cost ledger (scripts/bench/cost.sh): one training step of the CUDA backend as it would run, from the launches
// its launchers really issue. The kernel-model backend in count-only mode (kernel_model_backend.h) plays the step:
// zero_grad, forward_backward, the gradient norm, clipping and AdamW, as the trainer calls them, at the device's
// sizes and with cuBLASLt's fused epilogues taken. Every launch reports its global-memory bytes and FLOPs
// (cuda/launch_cost.h); the ledger sums them by phase and by kernel and models each launch's time on a stated device
// as the roofline max(bytes / bandwidth, FLOPs / peak), which gives a modelled step time and an MFU bound. It checks
// that every kernel launch and GEMM reported a cost and that the GEMMs' FLOPs are the model's, and exits 1 where not.
//
// Usage: ember_cost_ledger --config configs/gpt2-124m.ini [--training.batch_size=16 ...] [--launches]
// Any `ember train` option may follow; training.precision = auto counts as on a GPU (bf16).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "app/options.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernel_model_backend.h"
#include "launch_cost.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/local_step.h"
#include "train/memory_estimate.h"

namespace ember {
namespace {

struct Device {
  const char* name;
  double bandwidth;  // bytes/s
  double bf16_peak;  // dense bf16 tensor-core FLOP/s, fp32 accumulation
  double fp32_peak;  // FP32 FLOP/s on the CUDA cores (non-tensor)
  double int8_peak;  // dense int8 tensor-core operations/s, int32 accumulation
  double fp8_peak;   // dense fp8 tensor-core FLOP/s, fp32 accumulation
};
// The datasheets' figures: H100 SXM5 (HBM3) and GeForce RTX 4090 (dense; bf16 and fp8 with fp32 accumulation, which
// the GeForce cards run at half their fp16-accumulation rate).
const Device kDevices[] = {{"H100 SXM", 3.35e12, 989e12, 67e12, 1979e12, 1979e12},
                           {"RTX 4090", 1.008e12, 165.2e12, 82.6e12, 660.6e12, 330.3e12}};

// What an offloaded optimizer step moves and runs off the device (training.offload = optimizer, train/adamw.h), per
// device's usual host: the PCIe link each way (pinned copies at about 80% of the link's 32 GB/s (4.0 x16) or 64 GB/s
// (5.0 x16)), and the host's AdamW at the rate scripts/bench/adamw.sh measured per core (335 M parameters/s), capped
// by the host's memory bandwidth at the 28 bytes a parameter's update moves. The hosts are assumptions, stated: a
// 16-core desktop with dual-channel DDR5 (about 64 GB/s) beside the 4090, a 32-core server (about 200 GB/s) beside
// the H100.
struct OffloadHost {
  double pcie;            // bytes/s each way
  int cores;              // host threads running the update
  double host_bandwidth;  // bytes/s
};
const OffloadHost kOffloadHosts[] = {{50e9, 32, 200e9}, {25e9, 16, 64e9}};
constexpr double kHostAdamWPerCore = 1.0e9;  // parameters/s, docs/BENCHMARKS.md "Host AdamW" (its slowest)
constexpr double kHostAdamWBytes = 28.0;     // per parameter: reads p, g, m, v; writes p, m, v

struct Entry {
  std::string phase;
  LaunchCost cost;
};

class Ledger final : public LaunchCostSink {
 public:
  std::string phase = "setup";
  std::vector<Entry> entries;
  // The fused classifier (the loss and its gradient) ends the forward phase.
  void record(const LaunchCost& c) override {
    entries.push_back({phase, c});
    if (phase == "forward" && std::strcmp(c.name, "crossentropy_forward_backward") == 0) phase = "backward";
  }
};

// Roofline time of one launch on `d`: FLOPs at the int8 or fp8 tensor-core peak for those GEMMs, at the bf16 one where
// the launch runs on the tensor cores otherwise (bf16 GEMMs, the tensor-core attention), else at the CUDA cores' fp32
// peak.
double seconds(const Device& d, const LaunchCost& c) {
  const double peak = c.unit == FlopUnit::int8   ? d.int8_peak
                      : c.unit == FlopUnit::fp8  ? d.fp8_peak
                      : c.unit == FlopUnit::bf16 ? d.bf16_peak
                                                 : d.fp32_peak;
  return std::max((c.read_bytes + c.write_bytes) / d.bandwidth, c.flops / peak);
}

struct Sum {
  long long launches = 0;
  double read = 0, written = 0, flops = 0;
  double time[2] = {0, 0};
  void add(const LaunchCost& c) {
    ++launches;
    read += c.read_bytes, written += c.write_bytes, flops += c.flops;
    for (int i = 0; i < 2; ++i) time[i] += seconds(kDevices[i], c);
  }
};

void print_row(const std::string& name, const Sum& s) {
  printf("  %-34s %6lld %10.3f %10.3f %11.1f %10.3f %10.3f\n", name.c_str(), s.launches, s.read / 1e9, s.written / 1e9,
         s.flops / 1e9, s.time[0] * 1e3, s.time[1] * 1e3);
}

void print_header(const char* what) {
  printf("  %-34s %6s %10s %10s %11s %10s %10s\n", what, "count", "read GB", "write GB", "GFLOP", "H100 ms", "4090 ms");
}

// The step of an offloaded optimizer handed off layer by layer (train/adamw.h), as the code runs it at one rank: each
// stage's gradients (fp32) go to the host on the copy stream as the last micro-step's backward finishes the stage; a
// host thread updates each stage once its gradients are there (without clipping) or once backward and the norm are
// done (with it: the update needs the scale), and sends the stage's weights back on the same stream (return_bytes:
// fp32, or with the model's host masters the bf16 copy and the packed fp32 tensors), whose copies run one after the
// other. The stages' backward is taken as even: stage j of L + 1 (layers L-1..0, then the embeddings, which finish
// with layer 0) is final after min(j + 1, L) / L of the last backward; the norm takes `norm` after it. Returns the
// time from the end of backward to the last weight's return.
double handed_off_exposed(const std::vector<double>& stage_params, const std::vector<double>& return_bytes, int n_layer,
                          double backward, double norm, double pcie, double rate, bool clip) {
  double stream = 0.0, host = clip ? backward + norm : 0.0, end = backward;  // times from the last backward's start
  std::vector<double> arrived;
  for (size_t j = 0; j < stage_params.size(); ++j) {
    const double ready = backward * std::min<double>(double(j + 1), n_layer) / std::max(n_layer, 1);
    stream = std::max(stream, ready) + 4.0 * stage_params[j] / pcie;
    arrived.push_back(stream);
  }
  for (size_t j = 0; j < stage_params.size(); ++j) {  // the returns queue behind every fetch (issued first)
    host = std::max(host, arrived[j]) + stage_params[j] / rate;
    stream = std::max(stream, host) + return_bytes[j] / pcie;
    end = stream;
  }
  return end - backward;
}

// A whole optimizer step from the micro-step played: zero_grad once, grad_accum_steps forward and backward passes,
// then the optimizer phase, at one rank; and the same with training.offload = optimizer, whose device keeps the
// gradient norm and gives AdamW's launches to the host, handed off layer by layer (handed_off_exposed), with the
// configuration's clipping and without.
void print_optimizer_step(const RunConfig& c, const std::vector<Entry>& entries, std::map<std::string, Sum>& by_phase,
                          const ParamTable& table, size_t arena) {
  const int A = c.training.grad_accum_steps;
  const double tokens = double(A) * c.training.batch_size * c.training.seq_len;
  Sum adamw;
  for (const Entry& e : entries)
    if (e.phase == "optimizer" && std::string(e.cost.name).rfind("adamw", 0) == 0) adamw.add(e.cost);
  const MatmulPrecision precision = resolve_precision(c.training.precision, /*on_gpu=*/true);
  RunConfig off = c;
  off.training.offload = Offload::optimizer;
  const MemoryEstimate plain = estimate_training_memory(c, 1, precision),
                       offloaded = estimate_training_memory(off, 1, precision);
  // The arena's elements, padding included: the code copies and updates them; what goes back per stage.
  const WeightHome home = offload_weight_home(off, precision);
  const bool host_masters = home != WeightHome::device;
  const PackedFp32Layout packed(table);
  std::vector<double> stage_params, return_bytes;
  for (const GradientBucket& b : gradient_buckets(table, c.model.n_layer, arena, 0.0f)) {
    const auto [p0, p1] = packed.range(b.begin, b.end);
    stage_params.push_back(double(b.end - b.begin));
    // fp32; or the bf16 copy and the packed fp32 tensors; or under host_dense the packed tensors in fp32 and bf16.
    return_bytes.push_back(home == WeightHome::host_dense ? 6.0 * double(p1 - p0)
                           : host_masters                 ? 2.0 * double(b.end - b.begin) + 4.0 * double(p1 - p0)
                                                          : 4.0 * double(b.end - b.begin));
  }
  const double gib = 1.0 / 1073741824.0;
  printf(
      "\noptimizer step: %d micro-step(s) of %d x %d tokens, one rank; device memory (estimate) %.2f GiB, with "
      "training.offload = optimizer %.2f GiB on the device and %.2f GiB on the host\n",
      A, c.training.batch_size, c.training.seq_len, double(plain.total()) * gib, double(offloaded.total()) * gib,
      double(offloaded.host) * gib);
  for (int i = 0; i < 2; ++i) {
    const OffloadHost& h = kOffloadHosts[i];
    // The first micro-step also makes the weights' quantized copies (once per step); under host_dense they read
    // their bf16 source from the host, over the link (the device model's copies read fp32 masters: half the bytes).
    const double later = by_phase["again"].time[i];
    const double once = by_phase["forward"].time[i] + by_phase["backward"].time[i] - later;
    const double once_read = by_phase["forward"].read + by_phase["backward"].read - by_phase["again"].read;
    const double once_off = home == WeightHome::host_dense ? std::max(once, 0.5 * once_read / h.pcie) : once;
    const double device = by_phase["zero_grad"].time[i] + A * later + once;
    const double step = device + by_phase["optimizer"].time[i];
    // With host masters the update also writes each weight's bf16 copy in its pass: 2 bytes more a parameter.
    const double moved = kHostAdamWBytes + (host_masters ? 2.0 : 0.0);
    const double rate = std::min(h.cores * kHostAdamWPerCore, h.host_bandwidth / moved);
    double total = 0.0, returned = 0.0;
    for (double p : stage_params) total += p;
    for (double b : return_bytes) returned += b;
    const double norm = by_phase["optimizer"].time[i] - adamw.time[i];  // on the device, after backward
    double exposed[2], step_off[2];
    for (int clip = 0; clip < 2; ++clip) {
      exposed[clip] = handed_off_exposed(stage_params, return_bytes, c.model.n_layer, by_phase["backward"].time[i],
                                         norm, h.pcie, rate, clip == 1);
      step_off[clip] = device - once + once_off + std::max(norm, exposed[clip]);
    }
    printf(
        "%s: %.3f s per step (weight copies %.3f s), %.0f tokens/s; offloaded (PCIe %.0f GB/s each way, %d host "
        "cores): weight copies %.3f s, copies %.3f s and host update %.3f s in all, handed off per layer %.3f s past "
        "backward with clipping (%.3f s per step, %.0f tokens/s), %.3f s without (%.3f s, %.0f tokens/s)\n",
        kDevices[i].name, step, once, tokens / step, h.pcie / 1e9, h.cores, once_off, (4.0 * total + returned) / h.pcie,
        total / rate, exposed[1], step_off[1], tokens / step_off[1], exposed[0], step_off[0], tokens / step_off[0]);
  }
}

int run(int argc, char** argv) {
  bool launches = false;
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--launches") == 0)
      launches = true;
    else
      args.push_back(argv[i]);
  }
  const ParsedRun parsed = parse_train_args(int(args.size()), args.data());
  if (parsed.help) return 0;
  const RunConfig& c = parsed.config;
  const int B = c.training.batch_size, T = c.training.seq_len;
  const MatmulPrecision precision = resolve_precision(c.training.precision, /*on_gpu=*/true);

  Ledger ledger;
  launch_cost_sink() = &ledger;
  std::unique_ptr<Backend> be = make_kernel_model_backend(90, /*count_only=*/true);
  if (const std::string why = be->precision_unsupported(precision); !why.empty())
    throw_error("training.precision = " + matmul_precision_name(precision) + ": " + why,
                "run it with --training.precision=bf16, int8 or fp32");
  be->set_matmul_precision(precision);
  be->set_int8_weight_gradient(c.training.int8_weight_gradient);
  GPT model(c.model, *be, B, T, /*with_grads=*/true, c.training.recompute);
  const size_t arena = model.arena_numel();
  AdamW adam(*be, model.table(), c.optimizer, 0, arena);
  const std::vector<int32_t> tokens(size_t(B) * T, 0);

  const KernelModelCounts before = kernel_model_counts();
  ledger.entries.clear();
  // One micro-step as the trainer takes it (train/local_step.cpp), then the update; clipping counted as active. A
  // second micro-step ("again", kept apart from the step's sums) shows what a step's later micro-steps cost: the
  // first makes the weights' quantized copies, once per step.
  ledger.phase = "zero_grad";
  model.zero_grad();
  ledger.phase = "forward";  // the classifier's launch turns it into "backward" (Ledger::record)
  model.forward_backward(tokens.data(), tokens.data(), B, T, 1.0f);
  ledger.phase = "again";
  model.forward_backward(tokens.data(), tokens.data(), B, T, 1.0f);
  ledger.phase = "optimizer";
  be->sum_squares(model.grads(), arena);
  apply_update(adam, model.params(), model.grads(), 2.0f * c.training.max_norm, c, 0);
  launch_cost_sink() = nullptr;
  const KernelModelCounts after = kernel_model_counts();

  // Every launch reported: kernels (all but the backend's own memset and memcpy; the scaled int8 GEMM is one of the
  // backend's kernels) and the GEMMs the kernel model computes (cuBLAS's fp32, bf16 and int8 ones and the fp8 one; not
  // cuBLASLt's fused ones), one record each.
  long long kernels = 0, gemms = 0;
  for (const Entry& e : ledger.entries) {
    const std::string name = e.cost.name;
    const bool kernel_gemm = name.rfind("gemm_s8_scaled", 0) == 0;
    if (name == "gemm" || name == "gemm_s8" || name == "gemm_fp8") ++gemms;
    if ((!e.cost.gemm || kernel_gemm) && name != "memset" && name != "memcpy") ++kernels;
  }
  const long long launched = after.launches - before.launches, gemm_calls = after.gemms - before.gemms;
  if (kernels != launched || gemms != gemm_calls) {
    fprintf(stderr,
            "error: the ledger holds %lld kernel and %lld GEMM records, but the step launched %lld kernels and %lld "
            "GEMMs\nhint: a launcher in cuda/ launches without report_launch (cuda/launch_cost.h)\n",
            kernels, gemms, launched, gemm_calls);
    return 1;
  }

  // The GEMMs' FLOPs against the model's shape: forward 2 x tokens x (each layer's 12 C^2 dense weights + the lm_head's
  // V C, over the padded vocabulary), backward twice that plus what recomputation reruns of the forward: c_attn (3 C^2)
  // per layer for attention, everything up to the MLP's output projection (8 C^2) for full. A GEMM left out, or a block
  // of rows counted twice, shows here.
  const double Cm = c.model.n_embd, step_tokens = double(B) * T;
  const double dense = c.model.n_layer * 12.0 * Cm * Cm + double(c.model.padded_vocab_size()) * Cm;
  const double rerun = c.training.recompute == Recompute::attention ? 3.0
                       : c.training.recompute == Recompute::full    ? 8.0
                                                                    : 0.0;
  const double want_forward = 2.0 * step_tokens * dense;
  const double want_backward = 2.0 * want_forward + 2.0 * step_tokens * c.model.n_layer * rerun * Cm * Cm;
  double gemm_forward = 0.0, gemm_backward = 0.0;
  for (const Entry& e : ledger.entries)
    if (e.cost.gemm && e.phase != "again") (e.phase == "forward" ? gemm_forward : gemm_backward) += e.cost.flops;
  if (std::fabs(gemm_forward / want_forward - 1.0) > 1e-9 || std::fabs(gemm_backward / want_backward - 1.0) > 1e-9) {
    fprintf(
        stderr,
        "error: the ledger's GEMMs do %.12g FLOPs forward and %.12g backward, but the model's shape gives %.12g and "
        "%.12g\nhint: a matmul launcher reports a GEMM wrongly (cuda/cuda_matmul.cu)\n",
        gemm_forward, gemm_backward, want_forward, want_backward);
    return 1;
  }

  // Sums by phase and by kernel name, and the whole step.
  std::map<std::string, Sum> by_phase, by_kernel;
  std::vector<std::string> phase_order;
  Sum total, gemm, other;
  for (const Entry& e : ledger.entries) {
    if (!by_phase.count(e.phase)) phase_order.push_back(e.phase);
    by_phase[e.phase].add(e.cost);
    if (e.phase == "again") continue;
    by_kernel[e.cost.name].add(e.cost);
    total.add(e.cost);
    (e.cost.gemm ? gemm : other).add(e.cost);
  }
  double params = 0.0;  // the model's own: the vocabulary's padding rows and the arena's alignment are not parameters
  for (const ParamInfo& p : model.table().params()) params += double(p.numel);
  const double tokens_per_step = double(B) * T;
  // Model FLOPs per token as PaLM (and llm.c) count them: 6 N for the dense products, 12 L C T for attention.
  const double model_flops =
      tokens_per_step * (6.0 * params + 12.0 * c.model.n_layer * double(c.model.n_embd) * double(T));

  printf("cost ledger: one training step of the CUDA backend (count-only kernel model, sm_90 paths)\n");
  printf(
      "model: %d layers, %d heads, C %d, V %d (padded %d) (%.1fM parameters); B %d, T %d; matmul precision %s; "
      "recompute %s\n",
      c.model.n_layer, c.model.n_head, c.model.n_embd, c.model.vocab_size, c.model.padded_vocab_size(), params / 1e6, B,
      T, matmul_precision_name(precision).c_str(), recompute_name(c.training.recompute));
  for (const Device& d : kDevices)
    printf("device: %s (%.2f TB/s, %.0f TFLOP/s bf16, %.1f fp32, %.0f fp8, %.0f TOP/s int8)\n", d.name,
           d.bandwidth / 1e12, d.bf16_peak / 1e12, d.fp32_peak / 1e12, d.fp8_peak / 1e12, d.int8_peak / 1e12);
  printf("checked: %lld kernel launches and %lld plain GEMMs, each with its cost\n\n", launched, gemm_calls);
  if (launches) {
    printf("launches in order:\n");
    printf("  %5s %-10s %-34s %10s %10s %11s %10s %10s\n", "#", "phase", "launch", "read MB", "write MB", "MFLOP",
           "H100 us", "4090 us");
    int i = 0;
    for (const Entry& e : ledger.entries)
      printf("  %5d %-10s %-34s %10.2f %10.2f %11.1f %10.2f %10.2f\n", i++, e.phase.c_str(), e.cost.name,
             e.cost.read_bytes / 1e6, e.cost.write_bytes / 1e6, e.cost.flops / 1e6, seconds(kDevices[0], e.cost) * 1e6,
             seconds(kDevices[1], e.cost) * 1e6);
    printf("\n");
  }
  printf("by phase:\n");
  print_header("phase");
  for (const std::string& p : phase_order)
    if (p != "again") print_row(p, by_phase[p]);
  print_row("(a later micro-step)", by_phase["again"]);
  printf("\nby launch:\n");
  print_header("launch");
  for (const auto& [name, s] : by_kernel) print_row(name, s);
  printf("\nstep:\n");
  print_header("");
  print_row("GEMMs (cuBLAS, cuBLASLt, int8 kernel)", gemm);
  print_row("everything else", other);
  print_row("total", total);
  Sum attention;
  for (const auto& [name, s] : by_kernel)
    if (std::string(name).rfind("attention", 0) == 0) attention.read += s.read, attention.written += s.written;
  printf("\nnon-GEMM memory traffic per micro-step: %.2f GB (attention kernels %.2f GB, the rest %.2f GB)\n",
         (other.read + other.written) / 1e9, (attention.read + attention.written) / 1e9,
         (other.read + other.written - attention.read - attention.written) / 1e9);
  for (int i = 0; i < 2; ++i)
    printf("%s: modelled step %.2f ms (GEMMs %.2f, other %.2f); model FLOPs %.3g per step; MFU bound %.2f%%\n",
           kDevices[i].name, total.time[i] * 1e3, gemm.time[i] * 1e3, other.time[i] * 1e3, model_flops,
           100.0 * model_flops / (total.time[i] * kDevices[i].bf16_peak));
  print_optimizer_step(c, ledger.entries, by_phase, model.table(), arena);
  return 0;
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const ember::Error& e) {
    fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  } catch (const std::exception& e) {
    fprintf(stderr, "error: %s\nhint: ember_cost_ledger --config FILE [--section.key=value ...] [--launches]\n",
            e.what());
    return 1;
  }
}
