// Run set-up shared by the sync trainer and the async workers (implementation).
#include "train/run_setup.h"

#include <omp.h>

#include <cstdio>

#include "backend/cpu/blas_kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "model/attention_schedule.h"
#include "model/gpt.h"
#include "train/adamw.h"

namespace ember {

void set_training_threads(const TrainingConfig& training) {
  if (training.threads > 0) omp_set_num_threads(training.threads);
}

TrainingBackend make_training_backend(const World& world, const TrainingConfig& training) {
  set_training_threads(training);
  TrainingBackend tb;
  tb.device = select_device(world, training.device);
  tb.backend = make_backend(tb.device);
  const bool on_gpu = tb.device.kind == DEVICE_KIND_CUDA;
  const MatmulPrecision precision = resolve_precision(training.precision, on_gpu);
  if (const std::string why = tb.backend->precision_unsupported(precision); !why.empty())
    throw_error(
        "training.precision = " + matmul_precision_name(precision) + ": " + why,
        "use training.precision = bf16 on this GPU, or training.device = cpu for " + matmul_precision_name(precision));
  tb.backend->set_matmul_precision(precision);
  if (!on_gpu) log_info("cpu GEMMs: OpenBLAS with its %s kernels", blas_kernels());
  tb.backend->set_int8_stochastic_rounding(training.int8_stochastic_rounding);
  tb.backend->set_fp8_scaling(training.fp8_scaling);
  tb.backend->set_int8_weight_gradient(training.int8_weight_gradient);
  if (training.precision == PrecisionRequest::automatic)
    log_info("matmul precision: %s (training.precision = auto: bf16 on cuda, fp32 on cpu)",
             matmul_precision_name(precision).c_str());
  if (precision == MatmulPrecision::int8)
    log_info(
        "matmul precision int8: the dense layers' %s products in int8 (output gradients rounded %s) on %s; %sthe "
        "lm_head and attention in bf16; layernorms, the loss and AdamW in fp32",
        training.int8_weight_gradient ? "forward, input-gradient and weight-gradient"
                                      : "forward and input-gradient (training.int8_weight_gradient = false)",
        training.int8_stochastic_rounding ? "stochastically" : "to nearest: training.int8_stochastic_rounding = false",
        tb.backend->int8_engine().c_str(), training.int8_weight_gradient ? "" : "their weight gradients, ");
  if (precision == MatmulPrecision::fp8)
    log_info(
        "matmul precision fp8: the dense layers' forward, input-gradient and weight-gradient products in fp8 with one "
        "scale per tensor%s (activations and weights e4m3, output gradients e5m2, rounded to nearest); the lm_head "
        "and attention in bf16; layernorms, the loss and AdamW in fp32",
        training.fp8_scaling ? "" : " (unscaled: training.fp8_scaling = false)");
  tb.backend->set_deterministic(training.deterministic);
  return tb;
}

size_t log_model_memory(const GPT& model, const AdamW& optimizer, const Backend& backend, size_t extra_bytes) {
  const double mib = 1.0 / 1048576.0;
  log_info("model attention: %s", describe_attention(model.config()).c_str());
  const size_t shard_n = optimizer.shard_end() - optimizer.shard_begin();
  const size_t moments = optimizer.offloaded() ? 0 : 2 * shard_n * sizeof(float);
  const MatmulPrecision precision = backend.matmul_precision();
  const size_t copies = GPT::quantized_weight_copy_bytes(model.config(), precision);
  const size_t total = model.weight_bytes() + copies + moments + model.activation_bytes() + extra_bytes;
  char shard[64] = "", quantized[64] = "", adam[384] = "";
  if (optimizer.offloaded())
    snprintf(adam, sizeof(adam),
             "AdamW on the host (training.offload = optimizer: master weights, moments and "
             "staging %.1f MiB there%s%s)",
             double(optimizer.host_bytes()) * mib,
             model.home() == WeightHome::host_dense
                 ? "; the device keeps no fp32 arena, only the fp32 and bf16 embeddings, layernorms and biases: the "
                   "products quantize the dense weights from the host's bf16 copy"
             : model.host_masters() ? "; the device keeps no fp32 arena, only the bf16 copy and the fp32 embeddings, "
                                      "layernorms and biases"
                                    : "",
             optimizer.handoff_enabled() ? "; each layer's gradients go there as backward finishes it" : "");
  else
    snprintf(adam, sizeof(adam), "AdamW moments %.1f MiB", double(moments) * mib);
  if (extra_bytes) snprintf(shard, sizeof(shard), ", ZeRO-1 gradient shard %.1f MiB", double(extra_bytes) * mib);
  if (copies)
    snprintf(quantized, sizeof(quantized), ", %s weight copies %.1f MiB", matmul_precision_name(precision).c_str(),
             double(copies) * mib);
  log_info(
      "memory on %s: parameters + gradients%s %.1f MiB%s, %s, activations %.1f MiB "
      "(recompute = %s, matmul precision %s)%s; %.1f MiB in all",
      backend.name().c_str(), model.bf16_storage() ? " + bf16 weight copy" : "", double(model.weight_bytes()) * mib,
      quantized, adam, double(model.activation_bytes()) * mib, recompute_name(model.recompute()),
      matmul_precision_name(precision).c_str(), shard, double(total) * mib);
  return total;
}

void log_measured_memory(const Backend& backend, size_t counted_bytes, bool gpu_shared) {
  const double mib = 1.0 / 1048576.0;
  char device[200] = "";
  size_t used = 0, total = 0;
  if (backend.device_memory(&used, &total))
    snprintf(device, sizeof(device),
             "; the device reports %.1f of %.1f MiB in use (CUDA context and library "
             "workspaces included%s)",
             double(used) * mib, double(total) * mib, gpu_shared ? ", and the other ranks sharing this GPU" : "");
  log_info("memory measured after the first step on %s: peak %.1f MiB allocated (%.1f MiB counted at start-up)%s",
           backend.name().c_str(), double(backend.peak_allocated_bytes()) * mib, double(counted_bytes) * mib, device);
}

}  // namespace ember
