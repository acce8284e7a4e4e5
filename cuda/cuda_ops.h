// Launchers of the CUDA kernels: raw device pointers, sizes and a stream, with precondition asserts and a launch
// check. The CudaBackend methods adapt the Backend interface to these; a bf16 path adds launchers beside them.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "core/dither.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "core/int8_quant.h"

namespace ember {
struct AdamWSegment;  // backend/backend.h
}

namespace ember::cuda {

// Pieces of an op's scratch start 256-byte aligned, as cudaMalloc's do, so that each is as aligned as a whole buffer.
inline size_t piece_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

// encoder
void launch_encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C,
                            cudaStream_t stream);
// The backward pass sorts the token positions by id in `scratch`, of encoder_backward_scratch_bytes(B T).
size_t encoder_backward_scratch_bytes(int BT);
void launch_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream);
// A stable sort of n int32 (key, value) pairs by key (cuda_sort.cu, CUB's radix sort): keys ascending, the values of
// equal keys in their input order. `temp` is its working space, of sort_pairs_temp_bytes(n).
size_t sort_pairs_temp_bytes(int n);
void launch_sort_pairs(int32_t* keys_out, int32_t* values_out, const int32_t* keys_in, const int32_t* values_in, int n,
                       void* temp, size_t temp_bytes, cudaStream_t stream);

// layernorm
// The forward outputs may be stored in fp32 or bf16 (TensorOut, core/dtype.h).
void launch_layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C, cudaStream_t stream);
// residual = a + b, then the layernorm of residual, in one kernel; bitwise equal to launch_add +
// launch_layernorm_forward
void launch_residual_layernorm_forward(float* residual, TensorOut out, float* mean, float* rstd, const float* a,
                                       TensorIn b, const float* weight, const float* bias, int N, int C,
                                       cudaStream_t stream);
// `partial` is device scratch of layernorm_backward_scratch_floats(N, C) floats: the parameter gradients' partial sums
// over chunks of rows.
size_t layernorm_backward_scratch_floats(int N, int C);
// dout in fp32 or bf16 (read widened).
void launch_layernorm_backward(float* dinp, float* dweight, float* dbias, TensorIn dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C, float* partial,
                               cudaStream_t stream);

// cuBLASLt GEMMs with a fused epilogue, for the dense layers (column-major, as cuBLAS): D (m, n) = op(A) op(B) +
// beta D, then the bias added to every column (bias) or the bias gradient sum_k A[:, k] written out (bias_grad_a).
// Each distinct call (shape, transposes, precision, epilogue and the alignment of every pointer, which cuBLASLt's
// choice depends on) asks the heuristic once and keeps the answer; run() returns false where it has none, and the
// caller takes its plain cuBLAS path. One heuristic answer per call shape keeps results deterministic.
class LtGemm {
 public:
  enum class Epilogue { bias, bias_grad_a };
  // `workspace` (device memory of `workspace_bytes`) is the caller's; it must outlive this object.
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  // Count-only, for the cost ledger (launch_cost.h): run() reports the GEMM it would launch, as accepted, and touches
  // no device.
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  // A and B are both fp32 or, with `ab_bf16`, both bf16; D is fp32 or, with `d_bf16` (bf16 A and B only), bf16, and
  // the bias is stored as D is.
  bool run(Epilogue epilogue, bool ab_bf16, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int lda,
           const void* b, int ldb, float beta, void* d, bool d_bf16, int ldd, void* bias);
  // fp8: D (m, n) fp32 = A^T B, A stored (k, m) and B (k, n) in fp8 (not both E5M2), unscaled sums (fp32
  // accumulation, with cuBLASLt's periodic promotion: no fast accumulation). cuBLASLt's only form for fp8 ("TN"); m, n,
  // k and the leading dimensions multiples of 16. Throws where cuBLASLt has no kernel for it (there is no other path).
  void run_fp8(int m, int n, int k, const uint8_t* a, Fp8Format fa, int lda, const uint8_t* b, Fp8Format fb, int ldb,
               float* d, int ldd);

 private:
  struct Plan;
  struct Cache;
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  void* handle_ = nullptr;  // cublasLtHandle_t, kept out of this header
  Cache* cache_;
};

// matmul (cuBLAS: fp32 without TF32, or with `bf16` bf16 inputs and fp32 accumulation); the handle is bound to
// `stream`. With `lt`, the bias is added in the GEMM's epilogue and, in fp32, dbias comes from the dweight GEMM's,
// through `bias_grad` (device scratch of `bias_grad_capacity` floats), wherever cuBLASLt offers that; null: the plain
// path. inp and weight (or wte) are stored alike. The forward passes' out may be stored in bf16 under `bf16`, the bias
// then in bf16 too (the fp32 sum rounded once), and so may the backward passes' dout (read as it is, in one block,
// dbias summing its values; matmul_scratch_bytes takes dout_bf16). With `bf16`, fp32-stored inputs are rounded into
// `scratch` first
// (bf16-stored ones are read as they are), and the backward passes round dout into the scratch after them, as many
// whole rows at a time as fit, each block of rows one GEMM of each kind. A dbias summed by a kernel (always in bf16,
// where cuBLASLt does not offer it in fp32) takes its partial sums from the scratch too. matmul_scratch_bytes is what
// a call needs: inp_numel and weight_numel its inputs' sizes, dout_cols the width of dout for a backward pass (0 for a
// forward) and whether it is stored in bf16, whether it has a dbias, and at most dout_block_bytes (but one row at
// least) for dout's blocks.
size_t matmul_scratch_bytes(bool bf16, TensorIn inp, size_t inp_numel, size_t weight_numel, int N, int dout_cols,
                            bool dout_bf16, bool dbias, size_t dout_block_bytes);
void launch_matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC,
                           bool bf16, cublasHandle_t handle, LtGemm* lt, void* scratch, size_t scratch_bytes,
                           cudaStream_t stream);
// launch_matmul_backward's dout is the gradient at the layer's output or, with gelu_pre (bf16 and a dbias only), at
// the output of a GELU applied to it: gelu_pre is the layer's output, and the layer's gradient is formed from both in
// the pass that rounds dout to bf16 (cuda_gelu.cuh's derivative, as launch_gelu_backward forms it).
void launch_matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn gelu_pre,
                            TensorIn inp, TensorIn weight, int N, int IC, int OC, bool bf16, cublasHandle_t handle,
                            LtGemm* lt, float* bias_grad, size_t bias_grad_capacity, void* scratch,
                            size_t scratch_bytes, cudaStream_t stream);
// dst (C) += the column sums of src (N, C), fp32 or bf16, through column_sum_scratch_bytes(N, C) of scratch.
size_t column_sum_scratch_bytes(int N, int C);
void launch_column_sum(float* dst, TensorIn src, int N, int C, float* partial, cudaStream_t stream);
void launch_matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V, bool bf16,
                                      cublasHandle_t handle, void* scratch, size_t scratch_bytes, cudaStream_t stream);
void launch_matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N,
                                       int C, int V, bool bf16, cublasHandle_t handle, void* scratch,
                                       size_t scratch_bytes, cudaStream_t stream);

// attention; `delta` is (B, NH, T) scratch for the backward pass. The fp32 kernels (CUDA cores, head sizes up to
// 128) and, for matmul precision bf16 on sm_80 and newer, the tensor-core kernels (bf16 products, fp32 softmax and
// accumulation) for the head sizes of attention_in_bf16 (core/dtype.h).
// A layer's schedule as the kernels take it (backend/attention_layer.h): the window (0: full), the ALiBi slope and, for
// rope, the device table of core/rope.h ((T, HS/2) cos, then sin; null: no rotation).
struct AttentionSchedule {
  int window = 0;
  float alibi_slope = 0.0f;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
};
// Both kernel families take any schedule.
void launch_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                              const AttentionSchedule& sch, cudaStream_t stream);
void launch_attention_backward(TensorOut dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                               const float* lse, int B, int T, int C, int NH, const AttentionSchedule& sch,
                               cudaStream_t stream);
// The tensor-core kernels' qkv and out may be stored in bf16 (both alike); their D = dO . O reads O rounded to bf16
// either way. dqkv and dout may be stored in bf16 where qkv is (either kernel family: the fp32 one's widened path
// writes such a dqkv and widens such a dout).
void launch_attention_forward_tc(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH,
                                 const AttentionSchedule& sch, cudaStream_t stream);
void launch_attention_backward_tc(TensorOut dqkv, float* delta, TensorIn dout, TensorIn qkv, TensorIn out,
                                  const float* lse, int B, int T, int C, int NH, const AttentionSchedule& sch,
                                  cudaStream_t stream);

// KV-cache inference (cuda_kv_cache.cu), fp32: rows are tokens of several sequences, row i at position pos[i] of the
// sequence in cache slot slot[i]; pos and slot are device memory, each slot below the caches' S, and the caches rings
// of a.ring rows per slot (Backend::KvAttention). The attention takes any head size and any ring: one block per
// (row, head) walks the slot's keys in position order in tiles with an online softmax.
void launch_encoder_forward_positions(float* out, const int32_t* inp, const int32_t* pos, const float* wte,
                                      const float* wpe, int N, int C, cudaStream_t stream);
void launch_kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos,
                           int N, int C, int NH, const Backend::KvAttention& a, cudaStream_t stream);
void launch_attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                                 const int32_t* slot, const int32_t* pos, int N, int C, int NH,
                                 const Backend::KvAttention& a, cudaStream_t stream);

// int8 and fp8 quantization (cuda_quant.cuh), bit for bit the CPU's (core/int8_quant.h, core/fp8_quant.h); x may be
// stored in fp32 or bf16, and with `round_bf16` an fp32 x is read rounded to bf16 (a GEMM input's value, as the CPU's
// products read it). int8 per row: row r of x (rows, cols) into row r of q, ldq bytes apart (the columns after cols
// and q's rows from rows to qrows written 0: an int8 GEMM operand's padding), its scale into scales[r], dithered
// under *dither where it is given (element i = r cols + c drawing index i of the key's stream). Per column,
// transposed: column c into row c of q (rows values, then zeros up to ldq; q's rows from cols to qrows written 0), its
// scale into scales[c], element (r, c) drawing index first + r cols + c. fp8: one scale for x (n values), into q and
// scale_inverse (2 floats on the device: the scale, as cuBLASLt's scale pointers take it, and its inverse), through
// `partial` (kFp8AmaxBlocks floats of scratch).
constexpr unsigned kFp8AmaxBlocks = 256;  // the first pass of an fp8 tensor's largest magnitude: partials per tensor
void launch_quantize_int8_rows(int8_t* q, int ldq, int qrows, float* scales, TensorIn x, int rows, int cols,
                               bool round_bf16, const DitherKey* dither, cudaStream_t stream);
void launch_quantize_int8_columns_transposed(int8_t* q, int ldq, int qrows, float* scales, TensorIn x, int rows,
                                             int cols, bool round_bf16, const DitherKey* dither, uint64_t first,
                                             cudaStream_t stream);
void launch_quantize_fp8(uint8_t* q, float* scale_inverse, float* partial, TensorIn x, size_t n, Fp8Format f,
                         cudaStream_t stream);
// fp8 in two steps: a tensor's scale (n values; without `scaled`, 1: a test's weakened variant), then its codes laid
// out as a GEMM operand: row r of q holds row r of x (rows, cols) or, `transposed`, row c of q holds column c of x,
// rows ldq bytes apart, zeros after the values and in q's rows up to qrows.
void launch_fp8_tensor_scale(float* scale_inverse, float* partial, TensorIn x, size_t n, Fp8Format f, bool round_bf16,
                             bool scaled, cudaStream_t stream);
void launch_fp8_codes(uint8_t* q, int ldq, int qrows, TensorIn x, int rows, int cols, bool transposed, bool round_bf16,
                      const float* scale_inverse, Fp8Format f, cudaStream_t stream);

// The fp8 GEMM (cuda_gemm_fp8.cu: cuBLASLt through lt, LtGemm::run_fp8; the kernel model has its own): D (m, n) fp32
// = A^T B, column-major, A stored (k, m) and B (k, n) in fp8, the sums unscaled.
void launch_gemm_fp8(LtGemm* lt, int m, int n, int k, const uint8_t* a, Fp8Format fa, int lda, const uint8_t* b,
                     Fp8Format fb, int ldb, float* d, int ldd, cudaStream_t stream);

// The dense layers' int8 products (cuda_matmul_quant.cu), bit for bit the CPU backend's (backend.h's matmul_forward
// and matmul_backward under matmul precision int8). Quantized GEMM operands have their summed dimension, and the
// GEMM's m, padded with zeros to a multiple of kQuantPad. A weight's int8 copy: for the forward product W^T per output
// channel (OC rows of IC values, padded), for the input-gradient product W per input channel (IC rows of OC values,
// padded), with one scale per row; launch_int8_weight_copy makes one from the weight's stored values (fp32 masters),
// in int8_weight_copy_bytes of device memory (the values, then the scales, each 256-byte aligned).
constexpr int kQuantPad = 16;
inline int quant_padded(int n) { return (n + kQuantPad - 1) / kQuantPad * kQuantPad; }
struct Int8WeightCopy {
  int8_t* q = nullptr;
  float* scales = nullptr;
};
size_t int8_weight_copy_bytes(int IC, int OC, bool forward);
// The copy whose int8_weight_copy_bytes start at `at`.
Int8WeightCopy int8_weight_copy_at(char* at, int IC, int OC, bool forward);
void launch_int8_weight_copy(Int8WeightCopy copy, TensorIn weight, int IC, int OC, bool forward, cudaStream_t stream);
// Each product either `fused` (sm_80 and newer: int8_products_fused) in one kernel that applies the scales in
// registers (cuda_gemm_s8.cuh), or as cuBLAS's int8 GEMM into int32 scratch and an epilogue pass.
inline bool int8_products_fused(int compute_major) { return compute_major >= 8; }
// The forward product: inp's bf16 values quantized per token row (to nearest), out = (float(sum) * s_inp) * s_w + bias.
size_t matmul_int8_forward_scratch_bytes(int N, int IC, int OC, bool fused);
void launch_matmul_forward_int8(TensorOut out, TensorIn inp, Int8WeightCopy weight, TensorIn bias, int N, int IC,
                                int OC, bool fused, cublasHandle_t handle, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream);
// The backward pass: dinp from dout's bf16 values quantized per row (dithered under *dither, else to nearest) and the
// weight's input-gradient copy; dweight and dbias as launch_matmul_backward's under bf16 or, with
// `int8_weight_gradient`, dweight in int8 over tiles of kInt8WeightGradientTile tokens (core/int8_quant.h) and dbias
// the column sum of dout's values.
size_t matmul_int8_backward_scratch_bytes(TensorIn dout, TensorIn inp, bool dbias, bool int8_weight_gradient, int N,
                                          int IC, int OC, bool fused, size_t dout_block_bytes);
void launch_matmul_backward_int8(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp,
                                 Int8WeightCopy weight, int N, int IC, int OC, const DitherKey* dither,
                                 bool int8_weight_gradient, bool fused, cublasHandle_t handle, LtGemm* lt,
                                 float* bias_grad, size_t bias_grad_capacity, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream);

// The dense layers' fp8 products (cuda_matmul_quant.cu), as the CPU backend's (backend.h) save for the GEMMs' sums
// (the tensor cores' own order and accumulation). All three GEMM dimensions are padded to kQuantPad. A weight's fp8
// copy (E4M3, one scale): W^T (OC rows of IC) for the forward product and W (IC rows of OC) for the input-gradient
// product, both padded (cuBLASLt's fp8 GEMMs take only the "TN" form), the scale and its inverse, and the scale's
// working space; launch_fp8_weight_copy makes it from the weight's stored values.
struct Fp8WeightCopy {
  uint8_t* forward = nullptr;
  uint8_t* backward = nullptr;
  float* scale_inverse = nullptr;
  float* partial = nullptr;
};
size_t fp8_weight_copy_bytes(int IC, int OC);
Fp8WeightCopy fp8_weight_copy_at(char* at, int IC, int OC);
void launch_fp8_weight_copy(Fp8WeightCopy copy, TensorIn weight, int IC, int OC, bool scaled, cudaStream_t stream);
// Forward: out = (sum * s_inp) * s_w + bias, inp's bf16 values in E4M3. Backward: dinp from dout's bf16 values in
// E5M2, dweight += (sum of inp^T dout) * s_inp * s_dout, dbias the column sum of dout's values.
size_t matmul_fp8_forward_scratch_bytes(int N, int IC, int OC);
void launch_matmul_forward_fp8(TensorOut out, TensorIn inp, Fp8WeightCopy weight, TensorIn bias, int N, int IC, int OC,
                               bool scaled, LtGemm* lt, void* scratch, size_t scratch_bytes, cudaStream_t stream);
size_t matmul_fp8_backward_scratch_bytes(bool dbias, int N, int IC, int OC);
void launch_matmul_backward_fp8(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp,
                                Fp8WeightCopy weight, int N, int IC, int OC, bool scaled, LtGemm* lt, void* scratch,
                                size_t scratch_bytes, cudaStream_t stream);

// gelu; the input and the forward output may each be stored in fp32 or bf16
void launch_gelu_forward(TensorOut out, TensorIn inp, size_t n, cudaStream_t stream);
// gelu_backward writes dinp, which may alias dout
void launch_gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n, cudaStream_t stream);

// elementwise
void launch_add(float* out, const float* a, TensorIn b, size_t n, cudaStream_t stream);  // b fp32 or bf16
void launch_accumulate(float* dst, const float* src, size_t n, cudaStream_t stream);
void launch_scale(float* x, float s, size_t n, cudaStream_t stream);
void launch_cast_to_bf16(BFloat16* out, const float* inp, size_t n, cudaStream_t stream);
void launch_widen_bf16(float* out, const BFloat16* inp, size_t n, cudaStream_t stream);  // exact

// loss and sampling softmax
// logits and dlogits may be stored in fp32 or bf16; dlogits may alias logits (stored alike)
// The cross-entropy over rows ld elements apart (backend.h): columns V.. are left out, and the backward ops zero them.
void launch_crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V, int ld,
                                 cudaStream_t stream);
void launch_crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N, int V,
                                  int ld, cudaStream_t stream);
void launch_softmax_forward(float* probs, const float* logits, float temperature, int N, int V, cudaStream_t stream);
// The fused classifier: losses, and dlogits written over the logits (fp32 or bf16), two passes over each row.
void launch_crossentropy_forward_backward(float* losses, TensorOut logits, const int32_t* targets, float dloss, int N,
                                          int V, int ld, cudaStream_t stream);

// optimizer; `partials` holds kSumSquaresBlocks + 1 doubles of device scratch, the result lands in partials[last].
// AdamW's inverse bias corrections 1 / (1 - beta^t) come from the host in fp64, as the CPU backend computes them.
constexpr int kSumSquaresBlocks = 1024;
void launch_sum_squares(double* partials, const float* x, size_t n, cudaStream_t stream);
inline float adamw_inv_bias_correction(float beta, int t) { return float(1.0 / (1.0 - std::pow(double(beta), t))); }
// grad_scale multiplies each gradient as it is read (the clipping factor).
void launch_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float inv_bc1, float inv_bc2, float grad_scale,
                         cudaStream_t stream);
// segs: a device copy of nseg ascending segments spanning `span` elements from segs[0].begin.
void launch_adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                                  int nseg, size_t span, float lr, float beta1, float beta2, float eps, float inv_bc1,
                                  float inv_bc2, float grad_scale, cudaStream_t stream);

}  // namespace ember::cuda
