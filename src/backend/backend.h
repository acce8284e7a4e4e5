// The op interface every backend implements. Model code is written once against it; the CPU backend is the
// reference, a CUDA backend implements the same ops. All pointers are backend memory (from alloc()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/attention_layer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/int8_quant.h"

namespace ember {

// One piece of an AdamW update over several tensors: elements [begin, end) of the arrays, with its weight decay.
struct AdamWSegment {
  size_t begin = 0, end = 0;
  float weight_decay = 0.0f;
};

// Conventions shared by every op:
//  - Shapes are row-major; the shape of each argument is in its trailing comment.
//  - Matrices use the Hugging Face Conv1D orientation: weight (IC, OC), so out = inp @ weight + bias.
//  - Backward ops WRITE (=) the gradient of an activation that only one op consumes: the dinp of the matmul ops and
//    of gelu_backward, attention's dqkv. Nothing needs zeroing before them and no GEMM reads its output back. They
//    ACCUMULATE (+=) into parameter gradients (so micro-batches add up) and into layernorm_backward's dinp, the
//    residual stream's gradient where the branches meet. Callers zero those first.
//  - Token ids are int32.
//  - TensorIn/TensorOut arguments (core/dtype.h) are stored in fp32 or bf16: an output in bf16 holds its fp32 result
//    rounded to nearest even. The matmul ops take inp and weight stored alike, and bf16-stored ones only under matmul
//    precision bf16 (where fp32-stored ones are rounded as read), so the storage of a GEMM input never changes a
//    result; likewise attention's qkv and out (stored alike, in bf16 only where attention_in_bf16 holds). An output
//    stored in bf16 is rounded once more than an fp32 one, and an op that reads it (GELU's input) reads that value.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // --- memory ---
  virtual void* alloc(size_t bytes) = 0;  // zero-filled, 64-byte aligned
  virtual void free(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void copy_to_host(void* dst_host, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  // Host memory that this backend's copies read and write often (an offloaded optimizer's arrays): page-locked where
  // the device copies it faster so (CUDA: cudaMallocHost, which also lets a copy run beside the host's work), else
  // ordinary. Zero-filled, 64-byte aligned; freed with free_host. Not counted as this backend's memory.
  virtual void* alloc_host(size_t bytes);
  virtual void free_host(void* ptr);
  // Copies between this backend's memory and host memory from alloc_host that run beside the host and this backend's
  // later ops: each starts after the ops enqueued before it and is complete, in the host's view, once
  // wait_copy(ticket) returns. Wait for each ticket once, with at most kCopyTickets outstanding; until then neither
  // buffer may be touched. These three may be called from another host thread than the one issuing ops (an offloaded
  // optimizer's, once bind_thread ran there), and from two threads at once. The default copies at once; the kernel
  // model's backend copies only at the wait and poisons the destination until then, so a missing wait shows as NaN.
  using CopyTicket = uint64_t;
  static constexpr int kCopyTickets = 8;
  virtual CopyTicket copy_to_host_async(void* dst_host, const void* src, size_t bytes) {
    copy_to_host(dst_host, src, bytes);
    return 0;
  }
  virtual CopyTicket copy_to_device_async(void* dst, const void* src_host, size_t bytes) {
    copy_to_device(dst, src_host, bytes);
    return 0;
  }
  virtual void wait_copy(CopyTicket ticket) { (void)ticket; }
  virtual void synchronize() = 0;
  // True when the host may read this backend's allocations in place (the CPU backend): a checkpoint save then needs
  // no host copy of them.
  virtual bool host_addressable() const { return false; }
  // Makes the calling thread use this backend's device (CUDA keeps the current device per thread): a thread other than
  // the one that made the backend calls it before its first op.
  virtual void bind_thread() {}

  // --- embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; a null wpe (a model without learned positions) adds
  // nothing, and a null dwpe takes no gradient (here and in encoder_forward_positions) ---
  virtual void encoder_forward(float* out,          // (B, T, C)
                               const int32_t* inp,  // (B, T)
                               const float* wte,    // (V, C)
                               const float* wpe,    // (maxT, C)
                               int B, int T, int C) = 0;
  virtual void encoder_backward(float* dwte,         // (V, C) +=
                                float* dwpe,         // (maxT, C) +=
                                const float* dout,   // (B, T, C)
                                const int32_t* inp,  // (B, T)
                                int B, int T, int C) = 0;

  // --- layernorm over the last dim, eps 1e-5; saves per-row mean and reciprocal std for backward ---
  virtual void layernorm_forward(TensorOut out,        // (N, C)
                                 float* mean,          // (N)
                                 float* rstd,          // (N)
                                 const float* inp,     // (N, C)
                                 const float* weight,  // (C)
                                 const float* bias,    // (C)
                                 int N, int C) = 0;
  // dout may be stored in bf16 under matmul precision bf16 (the gradient a bf16 GEMM's backward pass wrote, rounded
  // once, as PyTorch's bf16 autocast hands it on): its values are read widened, the sums stay fp32.
  virtual void layernorm_backward(float* dinp,          // (N, C) +=
                                  float* dweight,       // (C) +=
                                  float* dbias,         // (C) +=
                                  TensorIn dout,        // (N, C)
                                  const float* inp,     // (N, C)
                                  const float* weight,  // (C)
                                  const float* mean,    // (N)
                                  const float* rstd,    // (N)
                                  int N, int C) = 0;

  // --- fused residual add + layernorm: residual = a + b, then out, mean and rstd as layernorm_forward of residual.
  // Bitwise equal to add() followed by layernorm_forward() on the same backend (this default does exactly that); a GPU
  // backend reads a and b once and writes both results from one kernel. residual may alias a (or an fp32 b). b may be
  // stored in bf16 (a branch's output under bf16 storage): its values are added, widened. ---
  virtual void residual_layernorm_forward(float* residual,      // (N, C)
                                          TensorOut out,        // (N, C)
                                          float* mean,          // (N)
                                          float* rstd,          // (N)
                                          const float* a,       // (N, C)
                                          TensorIn b,           // (N, C)
                                          const float* weight,  // (C)
                                          const float* bias,    // (C)
                                          int N, int C) {
    add(residual, a, b, size_t(N) * C);
    layernorm_forward(out, mean, rstd, residual, weight, bias, N, C);
  }

  // --- out = inp @ weight + bias (bias may be null). out may be stored in bf16 under matmul precision bf16: the fp32
  // product with the bias added, rounded once; the bias is then stored in bf16 too (stored as out is, either way),
  // as cuBLASLt's bf16 epilogue and PyTorch's bf16 autocast take it. ---
  // Under matmul precision int8: out = (float(sum_i qx[n,i] qw[i,o]) * sx[n]) * sw[o] + bias[o], each step rounded to
  // fp32 in that order (then to bf16 once, where out is so stored), where qx, sx are inp's bf16 values quantized per
  // row and qw, sw the weight's stored values (the fp32 masters) quantized per column, both to nearest
  // (core/int8_quant.h); the int32 sum is exact. There inp may be stored in bf16 beside an fp32 weight.
  virtual void matmul_forward(TensorOut out,    // (N, OC)
                              TensorIn inp,     // (N, IC)
                              TensorIn weight,  // (IC, OC)
                              TensorIn bias,    // (OC) or null
                              int N, int IC, int OC) = 0;
  // dinp = dout @ weight^T; dweight += inp^T @ dout; dbias += sum_rows(dout) (dbias may be null). dout may be stored
  // in bf16 under matmul precision bf16 (attention's dqkv is, where qkv is): the GEMMs read it as it is, which is what
  // they would read of its fp32 value anyway, and dbias sums its values. So may dinp (its fp32 value rounded once).
  // Under matmul precision int8 dinp is the int8 product: dout's bf16 values quantized per row with dithering keyed by
  // set_gradient_dither's key (element (n, o) is element n * OC + o of its stream), times the weight's stored values
  // quantized per row (input channel) to nearest, scaled as matmul_forward's; dweight and dbias as under bf16.
  virtual void matmul_backward(TensorOut dinp,   // (N, IC) =
                               float* dweight,   // (IC, OC) +=
                               float* dbias,     // (OC) += or null
                               TensorIn dout,    // (N, OC)
                               TensorIn inp,     // (N, IC)
                               TensorIn weight,  // (IC, OC)
                               int N, int IC, int OC) = 0;
  // The backward of out = gelu(inp @ weight + bias), given the gradient at the GELU's output: the layer's own output
  // gradient is dout * gelu'(pre), formed as gelu_backward forms it, where pre is the layer's output as matmul_forward
  // stored it; then matmul_backward of that. dout is the caller's scratch: what it holds afterwards is unspecified.
  // Under matmul precision bf16 dout may be stored in bf16 (the previous layer's dinp, rounded once): the gradient is
  // formed from its values, in fp32, and dbias sums that. This default runs gelu_backward in place over an fp32 dout
  // and then matmul_backward (the CPU backend widens a bf16 one first); a GPU backend forms the gradient in the pass
  // that rounds it to bf16 for the GEMMs and sums dbias, and never writes it back (a bf16 dout needs a dbias there).
  virtual void matmul_gelu_backward(TensorOut dinp,   // (N, IC) =, stored as matmul_backward's may be
                                    float* dweight,   // (IC, OC) +=
                                    float* dbias,     // (OC) += or null
                                    TensorOut dout,   // (N, OC) the gradient at gelu's output; clobbered
                                    TensorIn pre,     // (N, OC) the layer's output before the GELU
                                    TensorIn inp,     // (N, IC)
                                    TensorIn weight,  // (IC, OC)
                                    int N, int IC, int OC) {
    EMBER_ASSERT(!dout.bf16, "matmul_gelu_backward: this backend takes an fp32 dout");
    gelu_backward(dout.f32(), pre, dout.f32(), size_t(N) * OC);
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  // Logits against the tied embedding: out = inp @ wte^T, i.e. weight stored (V, C). Used for the lm_head. out may be
  // stored in bf16 under matmul precision bf16 (the fp32 result rounded once). Under int8 it is a bf16 product unless
  // set_int8_lm_head(true): then an int8 one as matmul_forward's, with wte's stored values quantized per row (output
  // channel) and inp's bf16 values per row, to nearest (the decoders set it; training keeps the lm_head in bf16).
  virtual void matmul_forward_transposed(TensorOut out,  // (N, V)
                                         TensorIn inp,   // (N, C)
                                         TensorIn wte,   // (V, C)
                                         int N, int C, int V) = 0;
  // dinp = dout @ wte; dwte += dout^T @ inp. dout may be stored in bf16 under matmul precision bf16, where an
  // fp32-stored one is rounded as read: a GEMM input like the others. So may dinp (its fp32 value rounded once).
  virtual void matmul_backward_transposed(TensorOut dinp,  // (N, C) =
                                          float* dwte,     // (V, C) +=
                                          TensorIn dout,   // (N, V)
                                          TensorIn inp,    // (N, C)
                                          TensorIn wte,    // (V, C)
                                          int N, int C, int V) = 0;

  // --- causal multi-head self-attention, flash style: never stores the (T, T) matrix ---
  // qkv holds q, k, v side by side on the last dim (each C = NH * HS). Scores are scaled by 1/sqrt(HS).
  // lse saves the log-sum-exp of each row of scaled scores for the backward pass. qkv and out are stored alike, in
  // bf16 only where attention_in_bf16 holds (core/dtype.h): there q, k and v are rounded to bf16 as read, and the
  // backward pass's D = dO . O reads O rounded to bf16, whichever the storage, so that the storage changes no value.
  // dqkv may be stored in bf16 where qkv is: its fp32 result rounded once (the layer before attention rounds its dout
  // to bf16 for its GEMMs in any case, so only its bias gradient sees the difference). So may dout, where out is (the
  // gradient c_proj's backward pass wrote, rounded once): the products read it as they would have rounded it, and
  // D = dO . O reads its stored values.
  // `layer` is the layer's window, ALiBi slope and rotary base (backend/attention_layer.h): keys outside the window
  // take no work, and q and k are rotated as they are read (qkv itself holds them unrotated). The overloads without
  // it are GPT-2's full attention.
  virtual void attention_forward(TensorOut out,  // (B, T, C)
                                 float* lse,     // (B, NH, T)
                                 TensorIn qkv,   // (B, T, 3C)
                                 int B, int T, int C, int NH, const AttentionLayer& layer) = 0;
  virtual void attention_backward(TensorOut dqkv,    // (B, T, 3C) =
                                  TensorIn dout,     // (B, T, C)
                                  TensorIn qkv,      // (B, T, 3C)
                                  TensorIn out,      // (B, T, C)
                                  const float* lse,  // (B, NH, T)
                                  int B, int T, int C, int NH, const AttentionLayer& layer) = 0;
  void attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH) {
    attention_forward(out, lse, qkv, B, T, C, NH, AttentionLayer{});
  }
  void attention_backward(TensorOut dqkv, TensorIn dout, TensorIn qkv, TensorIn out, const float* lse, int B, int T,
                          int C, int NH) {
    attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, AttentionLayer{});
  }

  // --- KV-cache inference (src/infer), in fp32. The N rows of a step are tokens of several sequences side by side:
  // row i is the token at position pos[i] of the sequence held in cache slot slot[i] (pos and slot are backend
  // memory). A layer's key and value caches are (S, ring, C) each, ring = KvAttention::ring: the keys (values) of slot
  // s's token at position p are row (s, p % ring), heads side by side as in qkv. ---
  // out[i,:] = wte[inp[i],:] + wpe[pos[i],:]
  virtual void encoder_forward_positions(float* out,          // (N, C)
                                         const int32_t* inp,  // (N)
                                         const int32_t* pos,  // (N), each in [0, maxT) where wpe is given
                                         const float* wte,    // (V, C)
                                         const float* wpe,    // (maxT, C)
                                         int N, int C) = 0;
  // One layer's attention over the caches. Query p sees the keys max(0, p - window) .. p (window 0: 0 .. p), which
  // the ring must still hold: p - first key < ring for every row, this step's own rows written before it reads
  // (KvModel sizes the rings so). ALiBi as in attention_forward; with rope_cos/rope_sin (backend memory, (N, HS/2)
  // each: row i's position's row of core/rope.h's table) keys are stored rotated and queries rotated as read.
  struct KvAttention {
    int ring = 0;  // cache rows per slot
    int window = 0;
    float alibi_slope = 0.0f;
    const float* rope_cos = nullptr;
    const float* rope_sin = nullptr;
  };
  // Copies each row's keys and values (the second and third C columns of its qkv row) to the caches at
  // (slot[i], pos[i] % ring), the keys rotated under rope. The rows of one call name distinct cache rows.
  virtual void kv_cache_write(float* k_cache,       // (S, ring, C)
                              float* v_cache,       // (S, ring, C)
                              const float* qkv,     // (N, 3C)
                              const int32_t* slot,  // (N)
                              const int32_t* pos,   // (N), each >= 0
                              int N, int C, int NH, const KvAttention& a) = 0;
  // Causal attention of each row's query (the first C columns of its qkv row) over its slot's cached keys and
  // values, which kv_cache_write has filled (for this step's rows too, before this call). Scores are scaled by
  // 1/sqrt(HS) as attention_forward's; the softmax and both products are fp32, the keys summed in position order.
  virtual void attention_kv_forward(float* out,            // (N, C)
                                    const float* qkv,      // (N, 3C)
                                    const float* k_cache,  // (S, ring, C)
                                    const float* v_cache,  // (S, ring, C)
                                    const int32_t* slot,   // (N)
                                    const int32_t* pos,    // (N)
                                    int N, int C, int NH, const KvAttention& a) = 0;
  // GPT-2's: caches of max_T rows, every earlier key, no bias, no rotation.
  void kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos, int N,
                      int C, int max_T) {
    kv_cache_write(k_cache, v_cache, qkv, slot, pos, N, C, 1, KvAttention{max_T});
  }
  void attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                            const int32_t* slot, const int32_t* pos, int N, int C, int NH, int max_T) {
    attention_kv_forward(out, qkv, k_cache, v_cache, slot, pos, N, C, NH, KvAttention{max_T});
  }

  // --- tanh-approximate GELU ---
  virtual void gelu_forward(TensorOut out, TensorIn inp, size_t n) = 0;  // (n)
  // dinp = dout * gelu'(inp); dinp may alias dout.
  virtual void gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) = 0;  // dinp = (n)

  // --- elementwise ---
  virtual void add(float* out, const float* a, TensorIn b, size_t n) = 0;    // out = a + b (b fp32 or bf16)
  virtual void accumulate(float* dst, const float* src, size_t n) = 0;       // dst += src
  virtual void scale(float* x, float s, size_t n) = 0;                       // x *= s
  virtual void cast_to_bf16(BFloat16* out, const float* inp, size_t n) = 0;  // out = bf16(inp), nearest even

  // --- softmax cross-entropy over V classes; targets in [0, V). The logits and dlogits may be stored in bf16 (the
  // sums are fp32 either way; dlogits is its fp32 value rounded). Rows are ld >= V elements apart (the padded
  // vocabulary: ModelConfig::padded_vocab_size): the columns from V on take no part, and the backward ops write them
  // as zero, so that the lm_head's backward GEMMs over all ld columns see nothing there. ---
  virtual void crossentropy_forward(float* losses,           // (N) per-row -log p[target]
                                    TensorIn logits,         // (N, ld)
                                    const int32_t* targets,  // (N)
                                    int N, int V, int ld) = 0;
  // dlogits = dloss * (softmax(logits) - onehot(target)); OVERWRITES dlogits, which may alias logits (stored alike).
  virtual void crossentropy_backward(TensorOut dlogits,       // (N, ld)
                                     TensorIn logits,         // (N, ld)
                                     const int32_t* targets,  // (N)
                                     float dloss, int N, int V, int ld) = 0;
  // --- fused classifier: crossentropy_forward and then crossentropy_backward of the same logits, the gradient written
  // over them (stored alike). This default calls the two ops; a GPU backend reads each row of logits twice instead of
  // five times (one online-softmax pass for the loss and the normaliser, one that writes the gradient), which sums in
  // another order, so its results agree with the two ops to rounding, not bitwise. ---
  virtual void crossentropy_forward_backward(float* losses,           // (N) per-row -log p[target]
                                             TensorOut logits,        // (N, ld) in: logits; out: dlogits
                                             const int32_t* targets,  // (N)
                                             float dloss, int N, int V, int ld) {
    crossentropy_forward(losses, logits, targets, N, V, ld);
    crossentropy_backward(logits, logits, targets, dloss, N, V, ld);
  }
  // Row-wise softmax with temperature, for sampling: probs = softmax(logits / temperature).
  virtual void softmax_forward(float* probs, const float* logits, float temperature, int N, int V) = 0;

  // --- reductions and optimizer ---
  virtual double sum_squares(const float* x, size_t n) = 0;  // sum of x^2 in fp64
  // AdamW with bias correction; t is the 1-based step. Decoupled weight decay: p -= lr * wd * p. Each gradient is
  // multiplied by grad_scale as it is read (gradient clipping's factor; 1 for none), which gives bitwise the update
  // from gradients scaled in place beforehand, without a pass over them.
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int t, float grad_scale) = 0;
  // The same update over many tensors in one call: segs (host memory; ascending, not overlapping) name the element
  // ranges of params/grads/m/v and each range's weight decay; elements between segments are left untouched. The
  // result equals one adamw_update per segment, bitwise. This default does exactly that; a GPU backend runs one
  // kernel over them all.
  virtual void adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                                     size_t nseg, float lr, float beta1, float beta2, float eps, int t,
                                     float grad_scale) {
    for (size_t k = 0; k < nseg; ++k)
      adamw_update(params + segs[k].begin, grads + segs[k].begin, m + segs[k].begin, v + segs[k].begin,
                   segs[k].end - segs[k].begin, lr, beta1, beta2, eps, segs[k].weight_decay, t, grad_scale);
  }
  // adamw_update_segments that also writes each updated weight rounded to bf16 (as cast_to_bf16) into params_bf16,
  // indexed as params (elements between segments untouched): the weights' bf16 copy made in the update's own pass,
  // which an offloaded optimizer's host update would otherwise make in a pass of its own. This default casts each
  // segment after its update.
  virtual void adamw_update_segments_bf16(float* params, BFloat16* params_bf16, const float* grads, float* m, float* v,
                                          const AdamWSegment* segs, size_t nseg, float lr, float beta1, float beta2,
                                          float eps, int t, float grad_scale) {
    adamw_update_segments(params, grads, m, v, segs, nseg, lr, beta1, beta2, eps, t, grad_scale);
    for (size_t k = 0; k < nseg; ++k)
      cast_to_bf16(params_bf16 + segs[k].begin, params + segs[k].begin, segs[k].end - segs[k].begin);
  }

  // --- the precision of the four matmul ops' GEMM inputs (core/dtype.h); fp32 until set ---
  void set_matmul_precision(MatmulPrecision p) { matmul_precision_ = p; }
  MatmulPrecision matmul_precision() const { return matmul_precision_; }
  // Why this backend cannot run matmul precision `p` (one line, naming the device), or empty where it can.
  virtual std::string precision_unsupported(MatmulPrecision p) const {
    (void)p;
    return "";
  }
  // What runs the int8 products here, for the start-up log (empty where the backend has none).
  virtual std::string int8_engine() const { return ""; }
  // The key of the next matmul_backward's dithered rounding under int8 (the model sets one per layer and product).
  void set_gradient_dither(const DitherKey& key) { dither_key_ = key; }
  // Whether int8 rounds those gradients stochastically (the default) or to nearest (a test's weakened variant).
  void set_int8_stochastic_rounding(bool on) { int8_stochastic_rounding_ = on; }
  // Whether fp8 scales each operand into the format's range (the default) or casts it unscaled (a test's weakened
  // variant). Set before the first product: weight copies made earlier keep their scaling.
  void set_fp8_scaling(bool on) { fp8_scaling_ = on; }
  // Whether int8 also runs the lm_head's forward product (matmul_forward_transposed) in int8; off by default.
  void set_int8_lm_head(bool on) { int8_lm_head_ = on; }
  // Whether int8 also runs the dense layers' weight-gradient products in int8 (scales per channel and tile of tokens,
  // backend/cpu/cpu_matmul_int8.h) rather than in bf16 (the default).
  void set_int8_weight_gradient(bool on) { int8_weight_gradient_ = on; }
  // Under int8 and fp8 a backend may keep the quantized copies of the weights its products read (as a bf16 model keeps
  // a bf16 copy), known by their address and made by the first product that reads a weight after this call: whoever
  // changes a weight in place calls it before the next product (the model does after an optimizer step, a load or an
  // exchange), so a weight is quantized once per step however many micro-batches read it. free() implies it.
  virtual void weights_changed() {}
  // The bytes those copies hold now (quantized_copy_bytes below predicts them, weight by weight).
  virtual size_t quantized_weight_copy_bytes() const { return 0; }

  // --- determinism: on (the default), repeated runs give bitwise-equal results; off lets a backend use faster
  // kernels whose reductions depend on timing (the CPU backend has none: it is deterministic either way) ---
  virtual void set_deterministic(bool on) { deterministic_ = on; }
  bool deterministic() const { return deterministic_; }

  // --- memory accounting: bytes held now and at most so far, counting alloc() and what the backend keeps of its own
  // (the CPU backend: its quantized weight copies, not its GEMM scratch) ---
  size_t allocated_bytes() const { return allocated_; }
  size_t peak_allocated_bytes() const { return peak_; }
  // What the device itself reports in use and in all (every process and library on it, the runtime's context
  // included); false where the backend has no such device (the CPU).
  virtual bool device_memory(size_t* used, size_t* total) const {
    (void)used;
    (void)total;
    return false;
  }

 protected:
  // Assert what the ops require of their storage (the conventions above); `op` names the op.
  void check_gemm_inputs(TensorIn inp, TensorIn weight, const char* op) const;
  void check_gemm_output(TensorOut out, TensorIn bias, const char* op) const;  // matmul_forward's out and bias
  void check_gemm_dout(TensorIn dout, const char* op) const;                   // a backward matmul's dout
  void check_attention_storage(TensorIn qkv, TensorIn out, int C, int NH, const char* op) const;
  // attention_backward's dqkv and dout
  void check_attention_grad_storage(TensorOut dqkv, TensorIn dout, TensorIn qkv, const char* op) const;
  void check_attention_layer(const AttentionLayer& layer, int C, int NH, const char* op) const;
  // Implementations call these for every allocation they make and free (null pointers are ignored).
  void track_alloc(const void* ptr, size_t bytes);
  void track_free(const void* ptr);

  MatmulPrecision matmul_precision_ = MatmulPrecision::fp32;
  DitherKey dither_key_;
  bool int8_stochastic_rounding_ = true;
  bool fp8_scaling_ = true;
  bool int8_weight_gradient_ = false;
  bool int8_lm_head_ = false;
  bool deterministic_ = true;

 private:
  std::unordered_map<const void*, size_t> live_;
  size_t allocated_ = 0, peak_ = 0;
};

// The bytes a backend keeps beside one weight of in x out values read by products at `precision`
// (Backend::weights_changed): under int8 the forward product's copy, scaled per output channel, and unless
// `forward_only` the input-gradient product's, scaled per input channel, each int8 with an fp32 scale per channel;
// under fp8 one copy and one fp32 scale; else none.
size_t quantized_copy_bytes(MatmulPrecision precision, size_t in, size_t out, bool forward_only = false);

// The CPU backend (OpenMP + OpenBLAS), always built; it is the reference for every other backend.
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend(int device);  // only in builds with the CUDA backend (EMBER_HAVE_CUDA)

}  // namespace ember
