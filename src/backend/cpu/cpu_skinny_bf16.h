// Products of a few fp32 rows with bf16-stored weights, for the CPU backend's matmul ops under matmul precision bf16
// (cpu_matmul.cpp takes them up to kSkinnyRows rows): the weights are widened as they stream, never copied.
#pragma once

#include "core/dtype.h"

namespace ember::cpu {

// Up to this many rows a product reads its weights once through these kernels; beyond, the GEMM's own blocking wins.
constexpr int kSkinnyRows = 16;

// out = x @ w (+ bias): out (N, OC) fp32, x (N, K) fp32 holding bf16 values, w (K, OC) bf16, bias (OC) fp32 or null.
void skinny_matmul_bf16(float* out, const float* x, const BFloat16* w, const float* bias, int N, int K, int OC);

// out = x @ wte^T: out (N, V) fp32, x (N, C) fp32 holding bf16 values, wte (V, C) bf16.
void skinny_matmul_transposed_bf16(float* out, const float* x, const BFloat16* wte, int N, int C, int V);

}  // namespace ember::cpu
