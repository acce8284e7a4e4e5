// CPU backend: tanh-approximate GELU, forward and backward; the input and the forward output may be stored in bf16.
// Uses 0.5 (1 + tanh(u)) = sigmoid(2u), so each element needs one vectorised exp and no tanh.
#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace ember {

using cpu::exp_approx;
using cpu::kMinParallelWork;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
// e^{-2u} is capped at e^60: beyond it |gelu(x)| = |x| sigmoid(2u) is below 1e-25 anyway, and the cap keeps
// sigmoid(2u) a normal float (denormals cost ~100 cycles each on x86). Below, e^{-2u} underflows harmlessly.
constexpr float kMinExpArg = -80.0f, kMaxExpArg = 60.0f;

EMBER_CPU_CLONES void gelu_forward_span(float* out, const float* inp, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = x / (1.0f + exp_approx(cpu::clamp_value(-2.0f * u, kMinExpArg, kMaxExpArg)));
  }
}

EMBER_CPU_CLONES void gelu_backward_span(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float e = exp_approx(cpu::clamp_value(-2.0f * u, kMinExpArg, kMaxExpArg));
    const float s = 1.0f / (1.0f + e);  // sigmoid(2u)
    // d/dx [x s(2u)] = s + 2 x s (1 - s) u', with s (1 - s) = (e s) s, which stays accurate where s is near 1.
    dinp[i] = dout[i] * (s + 2.0f * x * (e * s) * s * du);
  }
}

}  // namespace

// A bf16-stored input or output goes through fp32 pieces of kPiece elements on each thread's stack.
constexpr size_t kPiece = 1024;

void CpuBackend::gelu_forward(TensorOut out,  // (n)
                              TensorIn inp,   // (n)
                              size_t n) {
#pragma omp parallel if (n >= kMinParallelWork)
  {
    const cpu::Span s = cpu::thread_span(n, omp_get_thread_num(), omp_get_num_threads(), 16);
    if (!out.bf16 && !inp.bf16) {
      gelu_forward_span(out.f32() + s.begin, inp.f32() + s.begin, s.end - s.begin);
    } else {
      float x[kPiece], y[kPiece];
      for (size_t i = s.begin; i < s.end; i += kPiece) {
        const size_t len = std::min(kPiece, s.end - i);
        if (inp.bf16) widen_bf16(x, inp.b16() + i, len);
        const float* xi = inp.bf16 ? x : inp.f32() + i;
        float* yi = out.bf16 ? y : out.f32() + i;
        gelu_forward_span(yi, xi, len);
        if (out.bf16)
          for (size_t j = 0; j < len; ++j) out.b16()[i + j] = to_bf16(y[j]);
      }
    }
  }
}

void CpuBackend::gelu_backward(float* dinp,        // (n) =, may alias dout
                               TensorIn inp,       // (n)
                               const float* dout,  // (n)
                               size_t n) {
#pragma omp parallel if (n >= kMinParallelWork)
  {
    const cpu::Span s = cpu::thread_span(n, omp_get_thread_num(), omp_get_num_threads(), 16);
    if (!inp.bf16) {
      gelu_backward_span(dinp + s.begin, inp.f32() + s.begin, dout + s.begin, s.end - s.begin);
    } else {
      float x[kPiece];
      for (size_t i = s.begin; i < s.end; i += kPiece) {
        const size_t len = std::min(kPiece, s.end - i);
        widen_bf16(x, inp.b16() + i, len);
        gelu_backward_span(dinp + i, x, dout + i, len);
      }
    }
  }
}

}  // namespace ember
