// The tanh-approximate GELU's derivative as the CUDA kernels form it, shared by gelu_backward (cuda_gelu.cu) and the
// bf16 backward pass of a layer that feeds a GELU (cuda_matmul.cu), so that both give the same bits. It follows the
// CPU's formulation (cpu_gelu.cpp): 0.5 (1 + tanh(u)) is written as sigmoid(2u) = 1 / (1 + e^{-2u}), with e^{-2u}'s
// argument clamped as on the CPU.
#pragma once

#include "cuda_common.cuh"

namespace ember {
namespace cuda {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// Beyond e^60 the output is below 1e-25 anyway; the cap keeps sigmoid(2u) a normal float (as in cpu_gelu.cpp).
constexpr float kGeluMinExpArg = -80.0f, kGeluMaxExpArg = 60.0f;

// e^{-2u} for u = sqrt(2/pi) (x + 0.044715 x^3), clamped.
__device__ inline float gelu_exp(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return expf(fminf(fmaxf(-2.0f * u, kGeluMinExpArg), kGeluMaxExpArg));
}

// gelu'(x): d/dx [x s(2u)] = s + 2 x s (1 - s) u', with s (1 - s) = (e s) s, accurate where s is near 1.
__device__ inline float gelu_grad(float x) {
  const float e = gelu_exp(x);
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  const float s = 1.0f / (1.0f + e);  // sigmoid(2u)
  return s + 2.0f * x * (e * s) * s * du;
}

}  // namespace cuda
}  // namespace ember
