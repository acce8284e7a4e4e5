// CPU backend: dense layers (out = inp @ weight + bias) and the tied lm_head (out = inp @ wte^T), both directions.
// GEMMs go to OpenBLAS sliced over threads; the bias add and dbias reduction are plain static-split loops. With
// matmul precision bf16 the GEMM inputs are first rounded to bf16 (into scratch copies), which emulates a bf16 GEMM
// with fp32 accumulation exactly up to the order of the sums. bf16-stored inputs (the lm_head's dout included) are
// widened into the same scratch, and a bf16-stored output is the fp32 result rounded, computed in blocks of rows.
// Forward products of a few rows with bf16-stored weights stream the weights instead (cpu_skinny_bf16.h). Under int8
// the dense layers' forward and input-gradient products are int8, and their weight-gradient products unless the
// backend was told otherwise (cpu_matmul_int8.h), and the lm_head's forward product where the backend was told so;
// under fp8 all three are fp8 (cpu_matmul_fp8.h); the rest is as under bf16.
#include <omp.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_matmul_fp8.h"
#include "backend/cpu/cpu_matmul_int8.h"
#include "backend/cpu/cpu_skinny_bf16.h"

namespace ember {

using cpu::gemm_parallel;
using cpu::kMinParallelWork;

namespace {

// x itself in fp32; in bf16, a copy of its n values rounded to bf16, held in `scratch`; stored in bf16, its values
// widened into `scratch`.
const float* gemm_input(TensorIn x, size_t n, MatmulPrecision p, std::vector<float>& scratch) {
  if (!x.bf16 && p == MatmulPrecision::fp32) return x.f32();
  scratch.resize(n);
  float* s = scratch.data();
  if (x.bf16) {
    const BFloat16* b = x.b16();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; ++i) s[i] = from_bf16(b[i]);
  } else {
    const float* f = x.f32();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; ++i) s[i] = round_to_bf16(f[i]);
  }
  return s;
}

// x's stored values (a weight, which int8 quantizes from its fp32 masters): x itself in fp32, widened into `scratch`
// from bf16.
const float* stored_values(TensorIn x, size_t n, std::vector<float>& scratch) {
  if (!x.bf16) return x.f32();
  scratch.resize(n);
  widen_bf16(scratch.data(), x.b16(), n);
  return scratch.data();
}

// An (M, ncols) row-major GEMM result stored in `out`: straight into it in fp32; in bf16 computed in fp32 in blocks of
// rows (at most kRoundedBlockFloats floats of `scratch`, one row at least) and rounded into it. rows(r0, R, dst)
// writes rows r0 .. r0 + R - 1 of the fp32 result to dst (row stride ncols).
constexpr size_t kRoundedBlockFloats = size_t(1) << 22;  // 16 MiB
template <typename Rows>
void gemm_rows_into(TensorOut out, int M, int ncols, std::vector<float>& scratch, Rows rows) {
  if (!out.bf16) {
    rows(0, M, out.f32());
    return;
  }
  const int block = int(std::max<size_t>(1, std::min<size_t>(size_t(M), kRoundedBlockFloats / size_t(ncols))));
  scratch.resize(size_t(block) * ncols);
  for (int r0 = 0; r0 < M; r0 += block) {
    const int R = std::min(block, M - r0);
    rows(r0, R, scratch.data());
    const size_t n = size_t(R) * ncols;
    BFloat16* b = out.b16() + size_t(r0) * ncols;
    const float* f = scratch.data();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; ++i) b[i] = to_bf16(f[i]);
  }
}

}  // namespace

// The int8 copy of a weight (IC, OC), quantized from its stored values when it is not current: per output channel
// (its columns) for the forward product, per input channel (its rows) for the input-gradient product.
const cpu::Int8Weight& CpuBackend::int8_weight(TensorIn weight, int IC, int OC, bool per_output_channel) {
  cpu::Int8Weight& copy = (per_output_channel ? int8_forward_weights_ : int8_backward_weights_)[weight.ptr];
  const size_t n = size_t(IC) * OC, nscales = size_t(per_output_channel ? OC : IC);
  if (copy.current && copy.q.size() == n && copy.scales.size() == nscales) return copy;
  copy.q.resize(n), copy.scales.resize(nscales);
  const float* w = stored_values(weight, n, gemm_scratch_[1]);
  if (per_output_channel)
    quantize_int8_columns(w, size_t(IC), size_t(OC), copy.q.data(), copy.scales.data());
  else
    quantize_int8_rows(w, size_t(IC), size_t(OC), copy.q.data(), copy.scales.data());
  copy.current = true;
  track_quantized_copies();
  return copy;
}

// The int8 copy of wte (V, C) for the lm_head's forward product: wte^T (C, V), one scale per column (a row of wte,
// an output channel), laid out as the dense layers' forward copies are: oneDNN reads that layout as it is, where a
// transposed one is repacked on every call (the whole vocabulary's weights for each decoding step).
const cpu::Int8Weight& CpuBackend::int8_lm_head_weight(TensorIn wte, int C, int V) {
  cpu::Int8Weight& copy = int8_forward_weights_[wte.ptr];
  const size_t n = size_t(V) * C;
  if (copy.current && copy.q.size() == n && copy.scales.size() == size_t(V)) return copy;
  const float* w = stored_values(wte, n, gemm_scratch_[1]);
  std::vector<float>& t = gemm_scratch_[2];
  t.resize(n);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < V; ++v) t[size_t(c) * V + v] = w[size_t(v) * C + c];
  copy.q.resize(n), copy.scales.resize(size_t(V));
  quantize_int8_columns(t.data(), size_t(C), size_t(V), copy.q.data(), copy.scales.data());
  copy.current = true;
  track_quantized_copies();
  return copy;
}

// The fp8 copy (E4M3, one scale) of a weight (IC, OC), quantized from its stored values when it is not current.
const cpu::Fp8Weight& CpuBackend::fp8_weight(TensorIn weight, int IC, int OC) {
  cpu::Fp8Weight& copy = fp8_weights_[weight.ptr];
  const size_t n = size_t(IC) * OC;
  if (copy.current && copy.q.size() == n) return copy;
  cpu::quantize_fp8(stored_values(weight, n, gemm_scratch_[1]), n, Fp8Format::e4m3, fp8_scaling_, copy);
  copy.current = true;
  track_quantized_copies();
  return copy;
}

void CpuBackend::matmul_forward(TensorOut out,    // (N, OC)
                                TensorIn inp,     // (N, IC)
                                TensorIn weight,  // (IC, OC)
                                TensorIn bias,    // (OC) or null
                                int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_forward");
  check_gemm_output(out, bias, "matmul_forward");
  auto& [si, sw, sg, so] = gemm_scratch_;
  const MatmulPrecision p = matmul_precision_;
  const float* x = gemm_input(inp, size_t(N) * IC, p, si);
  if (p == MatmulPrecision::int8) {  // activations per row, the weight per output channel
    auto& qx = int8_rows_;
    qx.q.resize(size_t(N) * IC), qx.scales.resize(size_t(N));
    quantize_int8_rows(x, size_t(N), size_t(IC), qx.q.data(), qx.scales.data());
    const cpu::Int8Weight& qw = int8_weight(weight, IC, OC, true);
    gemm_rows_into(out, N, OC, so, [&](int r0, int R, float* o) {
      cpu::int8_product_rows(o, qx.q.data() + size_t(r0) * IC, qx.scales.data() + r0, qw.q.data(), false,
                             qw.scales.data(), bias, R, IC, OC);
    });
    return;
  }
  if (p == MatmulPrecision::fp8) {  // activations and the weight in e4m3, one scale each
    cpu::quantize_fp8(x, size_t(N) * IC, Fp8Format::e4m3, fp8_scaling_, fp8_inp_);
    const cpu::Fp8Weight& qw = fp8_weight(weight, IC, OC);
    gemm_rows_into(out, N, OC, so, [&](int r0, int R, float* o) {
      cpu::fp8_product(o, fp8_inp_, false, r0, qw, false, bias, false, R, OC, IC, fp8_scratch_);
    });
    return;
  }
  if (weight.bf16 && !out.bf16 && !bias.bf16 && N <= cpu::kSkinnyRows) {  // a decoding step: bound by the weights
    cpu::skinny_matmul_bf16(out.f32(), x, weight.b16(), bias.f32(), N, IC, OC);
    return;
  }
  const float* w = gemm_input(weight, size_t(IC) * OC, p, sw);
  gemm_rows_into(out, N, OC, so, [&](int r0, int R, float* o) {
    // Seed the rows with the bias and let the GEMM accumulate onto it (beta = 1): OpenBLAS would otherwise spend the
    // same pass zeroing them for beta = 0, so the bias costs nothing extra.
    if (bias.ptr) {
#pragma omp parallel for schedule(static) if (size_t(R) * OC >= kMinParallelWork)
      for (int r = 0; r < R; ++r) {
        float* row = o + size_t(r) * OC;
        if (bias.bf16) {
          widen_bf16(row, bias.b16(), size_t(OC));
        } else {
#pragma omp simd
          for (int c = 0; c < OC; ++c) row[c] = bias.f32()[c];
        }
      }
    }
    gemm_parallel(false, false, R, OC, IC, 1.0f, x + size_t(r0) * IC, IC, w, OC, bias.ptr ? 1.0f : 0.0f, o, OC);
  });
}

void CpuBackend::matmul_backward(TensorOut dinp,   // (N, IC) =
                                 float* dweight,   // (IC, OC) +=
                                 float* dbias,     // (OC) += or null
                                 TensorIn dout,    // (N, OC)
                                 TensorIn inp,     // (N, IC)
                                 TensorIn weight,  // (IC, OC)
                                 int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_backward");
  check_gemm_dout(dout, "matmul_backward");
  auto& [si, sw, sg, so] = gemm_scratch_;
  const MatmulPrecision p = matmul_precision_;
  const float* dy = gemm_input(dout, size_t(N) * OC, p, sg);
  const float* dsum = dout.bf16 ? dy : dout.f32();  // dbias sums dout's values: fp32 ones unrounded, bf16 ones widened
  EMBER_ASSERT(!dinp.bf16 || gemm_inputs_in_bf16(p),
               "matmul_backward: a bf16-stored dinp needs a matmul precision other than fp32");
  // dinp = dout @ W^T (into bf16 storage rounded, in blocks of rows); dW += inp^T @ dout
  if (p == MatmulPrecision::int8) {  // dout per row, dithered; the weight per input channel
    auto& qd = int8_rows_;
    qd.q.resize(size_t(N) * OC), qd.scales.resize(size_t(N));
    if (int8_stochastic_rounding_)
      quantize_int8_rows_dithered(dy, size_t(N), size_t(OC), dither_key_, qd.q.data(), qd.scales.data());
    else
      quantize_int8_rows(dy, size_t(N), size_t(OC), qd.q.data(), qd.scales.data());
    const cpu::Int8Weight& qw = int8_weight(weight, IC, OC, false);
    gemm_rows_into(dinp, N, IC, so, [&](int r0, int R, float* o) {
      cpu::int8_product_rows(o, qd.q.data() + size_t(r0) * OC, qd.scales.data() + r0, qw.q.data(), true,
                             qw.scales.data(), nullptr, R, OC, IC);
    });
  } else if (p == MatmulPrecision::fp8) {  // dout in e5m2 and the weight in e4m3, one scale each
    cpu::quantize_fp8(dy, size_t(N) * OC, Fp8Format::e5m2, fp8_scaling_, fp8_dout_);
    const cpu::Fp8Weight& qw = fp8_weight(weight, IC, OC);
    gemm_rows_into(dinp, N, IC, so, [&](int r0, int R, float* o) {
      cpu::fp8_product(o, fp8_dout_, false, r0, qw, true, nullptr, false, R, IC, OC, fp8_scratch_);
    });
  } else {
    const float* w = gemm_input(weight, size_t(IC) * OC, p, sw);
    gemm_rows_into(dinp, N, IC, so, [&](int r0, int R, float* o) {
      gemm_parallel(false, true, R, IC, OC, 1.0f, dy + size_t(r0) * OC, OC, w, OC, 0.0f, o, IC);
    });
  }
  if (p == MatmulPrecision::int8 && int8_weight_gradient_) {  // dW += inp^T @ dout in int8, by tiles of tokens
    cpu::int8_weight_gradient(dweight, gemm_input(inp, size_t(N) * IC, p, si), dy, N, IC, OC,
                              int8_stochastic_rounding_ ? &dither_key_ : nullptr, int8_weight_gradient_scratch_);
  } else if (p == MatmulPrecision::fp8) {  // dW += inp^T @ dout: inp in e4m3 (as forward quantized it), dout as above
    // inp is quantized again rather than kept from the forward pass: the same codes, and no fp8 copy of every dense
    // layer's input held from forward to backward (N IC bytes per layer, beside the activations).
    cpu::quantize_fp8(gemm_input(inp, size_t(N) * IC, p, si), size_t(N) * IC, Fp8Format::e4m3, fp8_scaling_, fp8_inp_);
    cpu::fp8_product(dweight, fp8_inp_, true, 0, fp8_dout_, false, nullptr, true, IC, OC, N, fp8_scratch_);
  } else {
    gemm_parallel(true, false, IC, OC, N, 1.0f, gemm_input(inp, size_t(N) * IC, p, si), IC, dy, OC, 1.0f, dweight, OC);
  }
  if (dbias) {
    // Split over OC (whole cache lines per thread), rows summed in order: identical for any thread count.
#pragma omp parallel if (size_t(N) * OC >= kMinParallelWork)
    {
      const cpu::Span s = cpu::thread_span(size_t(OC), omp_get_thread_num(), omp_get_num_threads(), 16);
      const int c0 = int(s.begin), c1 = int(s.end);
      for (int r = 0; r < N && c0 < c1; ++r) {
        const float* g = dsum + size_t(r) * OC;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dbias[c] += g[c];
      }
    }
  }
}

void CpuBackend::matmul_gelu_backward(TensorOut dinp,   // (N, IC) =
                                      float* dweight,   // (IC, OC) +=
                                      float* dbias,     // (OC) += or null
                                      TensorOut dout,   // (N, OC) clobbered
                                      TensorIn pre,     // (N, OC)
                                      TensorIn inp,     // (N, IC)
                                      TensorIn weight,  // (IC, OC)
                                      int N, int IC, int OC) {
  if (!dout.bf16) {
    Backend::matmul_gelu_backward(dinp, dweight, dbias, dout, pre, inp, weight, N, IC, OC);
    return;
  }
  // A bf16-stored dout: its values widened into fp32, the gradient formed there as gelu_backward forms it, then the
  // fp32 gradient's backward pass (its GEMMs round it; dbias sums it).
  const size_t n = size_t(N) * OC;
  gelu_scratch_.resize(n);
  float* g = gelu_scratch_.data();
  const BFloat16* d = dout.b16();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) g[i] = from_bf16(d[i]);
  gelu_backward(g, pre, g, n);
  matmul_backward(dinp, dweight, dbias, g, inp, weight, N, IC, OC);
}

void CpuBackend::matmul_forward_transposed(TensorOut out,  // (N, V)
                                           TensorIn inp,   // (N, C)
                                           TensorIn wte,   // (V, C)
                                           int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_forward_transposed");
  check_gemm_output(out, nullptr, "matmul_forward_transposed");
  auto& [si, sw, sg, so] = gemm_scratch_;
  const MatmulPrecision p = matmul_precision_;
  const float* x = gemm_input(inp, size_t(N) * C, p, si);
  if (p == MatmulPrecision::int8 && int8_lm_head_) {  // inp per row, wte per row (its output channels), both nearest
    auto& qx = int8_rows_;
    qx.q.resize(size_t(N) * C), qx.scales.resize(size_t(N));
    quantize_int8_rows(x, size_t(N), size_t(C), qx.q.data(), qx.scales.data());
    const cpu::Int8Weight& qw = int8_lm_head_weight(wte, C, V);
    gemm_rows_into(out, N, V, so, [&](int r0, int R, float* o) {
      cpu::int8_product_rows(o, qx.q.data() + size_t(r0) * C, qx.scales.data() + r0, qw.q.data(), false,
                             qw.scales.data(), nullptr, R, C, V);
    });
    return;
  }
  if (wte.bf16 && !out.bf16 && N <= cpu::kSkinnyRows) {  // the lm_head of a decoding step
    cpu::skinny_matmul_transposed_bf16(out.f32(), x, wte.b16(), N, C, V);
    return;
  }
  const float* w = gemm_input(wte, size_t(V) * C, p, sw);
  gemm_rows_into(out, N, V, so, [&](int r0, int R, float* o) {
    gemm_parallel(false, true, R, V, C, 1.0f, x + size_t(r0) * C, C, w, C, 0.0f, o, V);
  });
}

void CpuBackend::matmul_backward_transposed(TensorOut dinp,  // (N, C) =
                                            float* dwte,     // (V, C) +=
                                            TensorIn dout,   // (N, V)
                                            TensorIn inp,    // (N, C)
                                            TensorIn wte,    // (V, C)
                                            int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_backward_transposed");
  check_gemm_dout(dout, "matmul_backward_transposed");
  auto& [si, sw, sg, so] = gemm_scratch_;
  const MatmulPrecision p = matmul_precision_;
  EMBER_ASSERT(!dinp.bf16 || gemm_inputs_in_bf16(p),
               "matmul_backward_transposed: a bf16-stored dinp needs a matmul precision other than fp32");
  const float* g = gemm_input(dout, size_t(N) * V, p, sg);
  // dinp = dout @ wte (into bf16 storage rounded, in blocks of rows); dwte += dout^T @ inp
  const float* w = gemm_input(wte, size_t(V) * C, p, sw);
  gemm_rows_into(dinp, N, C, so, [&](int r0, int R, float* o) {
    gemm_parallel(false, false, R, C, V, 1.0f, g + size_t(r0) * V, V, w, C, 0.0f, o, C);
  });
  gemm_parallel(true, false, V, C, N, 1.0f, g, V, gemm_input(inp, size_t(N) * C, p, si), C, 1.0f, dwte, C);
}

}  // namespace ember
