// The KV-cache forward pass (implementation): GPT::forward's sequence of ops over a step's rows, with the attention
// reading each row's earlier keys and values from its slot's cache instead of recomputing them.
#include "infer/kv_model.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/rope.h"
#include "model/attention_schedule.h"
#include "model/memory_estimate.h"

namespace ember {

namespace {

// Whether positions run past max_T (KvModel::rolling_context).
bool rolling(const ModelConfig& config, const KvModelShape& s) {
  return config.position == PositionEncoding::rope && s.max_T >= 2;
}

// Layer l's cache ring and window. A window of w keeps its w earlier keys and a step's own rows (up to max_rows), so
// that no row of a step overwrites a key an earlier row of the same step still reads; a full layer keeps max_T rows,
// or under a rolling context the last max_T - 1 keys and a step's rows.
Backend::KvAttention kv_attention(const ModelConfig& config, const KvModelShape& s, int l) {
  const AttentionLayer layer = config.attention(l);
  Backend::KvAttention a;
  a.alibi_slope = layer.alibi_slope;
  const int before = layer.window > 0 ? std::min(layer.window, s.max_T - 1) : s.max_T - 1;  // earlier keys seen
  if (rolling(config, s)) {
    a.window = before, a.ring = before + s.max_rows;
  } else {
    a.window = layer.window, a.ring = layer.window > 0 ? std::min(s.max_T, layer.window + s.max_rows) : s.max_T;
  }
  return a;
}

// Every buffer the constructor allocates, in floats (int32 ids count as one each), from the shape alone.
struct KvSizes {
  size_t params, caches, ids, rows_c, rows_1, rows_3c, rows_4c, picked, logits, rope;
};

KvSizes kv_sizes(const ModelConfig& config, const KvModelShape& s) {
  const size_t R = size_t(s.max_rows), M = size_t(s.max_logit_rows), C = size_t(config.n_embd);
  size_t caches = 0;  // both caches of every layer
  for (int l = 0; l < config.n_layer; ++l)
    caches += 2 * size_t(s.max_slots) * size_t(kv_attention(config, s, l).ring) * C;
  const size_t rope = config.position == PositionEncoding::rope ? R * size_t(config.head_dim() / 2) : 0;
  return KvSizes{ParamTable(config).total_numel(), caches, R, R * C, R, R * 3 * C, R * 4 * C, M * C,
                 M * size_t(config.vocab_size),    rope};
}

KvModelShape resolved(const ModelConfig& config, KvModelShape shape) {
  if (shape.max_T == 0) shape.max_T = config.block_size;
  EMBER_ASSERT(shape.max_T >= 1 && shape.max_T <= config.block_size, "max_T must be in [1, block_size]");
  EMBER_ASSERT(shape.max_slots >= 1 && shape.max_rows >= 1 && shape.max_logit_rows >= 1,
               "a KvModel needs at least one slot, row and logit row");
  return shape;
}

}  // namespace

size_t KvModel::quantized_weight_copy_bytes(const ModelConfig& config, MatmulPrecision precision) {
  if (precision != MatmulPrecision::int8) return 0;
  // The forward products' copies only: each layer's c_attn, attention's c_proj, c_fc and the MLP's c_proj, and the
  // lm_head's (wte, V output rows).
  const size_t C = size_t(config.n_embd), V = size_t(config.vocab_size);
  size_t layer = 0;
  for (const auto& [in, out] : dense_weight_shapes(config))
    layer += quantized_copy_bytes(precision, in, out, /*forward_only=*/true);
  return size_t(config.n_layer) * layer + quantized_copy_bytes(precision, C, V, /*forward_only=*/true);
}

size_t KvModel::footprint_bytes(const ModelConfig& config, KvModelShape shape, MatmulPrecision precision) {
  const bool bf16_storage = gemm_inputs_in_bf16(precision);
  const KvSizes z = kv_sizes(config, resolved(config, shape));
  const size_t f = sizeof(float), g = bf16_storage ? sizeof(BFloat16) : sizeof(float);
  // ids: tokens, slots, positions; fp32 rows: x, att, proj (C), mean, rstd (1), qkv (3C), fc (4C); GEMM inputs: ln,
  // att_in (C), fc_gelu (4C), picked.
  size_t bytes = z.params * (f + (bf16_storage ? sizeof(BFloat16) : 0)) + z.caches * f + 2 * z.rope * f +
                 3 * z.ids * sizeof(int32_t) + (3 * z.rows_c + 2 * z.rows_1 + z.rows_3c + z.rows_4c + z.logits) * f;
  bytes += (z.rows_c + z.rows_4c + z.picked) * g + (bf16_storage ? z.rows_c * g : 0);
  return bytes;
}

float* KvModel::alloc_floats(size_t n) {
  void* ptr = backend_.alloc(n * sizeof(float));
  allocations_.push_back(ptr);
  allocated_bytes_ += n * sizeof(float);
  return static_cast<float*>(ptr);
}

TensorOut KvModel::alloc_gemm_input(size_t n) {
  if (!bf16_) return alloc_floats(n);
  void* ptr = backend_.alloc(n * sizeof(BFloat16));
  allocations_.push_back(ptr);
  allocated_bytes_ += n * sizeof(BFloat16);
  return static_cast<BFloat16*>(ptr);
}

KvModel::KvModel(const ModelConfig& config, Backend& backend, KvModelShape shape)
    : config_(config),
      backend_(backend),
      shape_(resolved(config, shape)),
      table_(config),
      bf16_(gemm_inputs_in_bf16(backend.matmul_precision())),
      int8_(backend.matmul_precision() == MatmulPrecision::int8) {
  EMBER_ASSERT(config.n_embd % config.n_head == 0, "n_embd must be a multiple of n_head");
  EMBER_ASSERT(attention_schedule_problem(config).empty(), attention_schedule_problem(config));
  rolling_ = rolling(config_, shape_);
  EMBER_ASSERT(backend.matmul_precision() != MatmulPrecision::fp8, "a KvModel decodes in fp32, bf16 or int8");
  backend.set_int8_lm_head(int8_);
  const KvSizes z = kv_sizes(config_, shape_);
  params_ = alloc_floats(z.params);
  if (bf16_) {
    params_bf16_ = alloc_gemm_input(z.params).b16();
  }
  for (int l = 0; l < config_.n_layer; ++l) {
    const size_t floats = size_t(shape_.max_slots) * size_t(layer_attention(l).ring) * size_t(config_.n_embd);
    k_cache_.push_back(alloc_floats(floats));
    v_cache_.push_back(alloc_floats(floats));
  }
  if (z.rope) {
    rope_cos_ = alloc_floats(z.rope), rope_sin_ = alloc_floats(z.rope);
    rope_host_.resize(2 * z.rope);
  }
  static_assert(sizeof(int32_t) == sizeof(float));
  tokens_ = reinterpret_cast<int32_t*>(alloc_floats(z.ids));
  slots_ = reinterpret_cast<int32_t*>(alloc_floats(z.ids));
  pos_ = reinterpret_cast<int32_t*>(alloc_floats(z.ids));
  x_ = alloc_floats(z.rows_c);
  att_ = alloc_floats(z.rows_c);
  proj_ = alloc_floats(z.rows_c);
  mean_ = alloc_floats(z.rows_1);
  rstd_ = alloc_floats(z.rows_1);
  qkv_ = alloc_floats(z.rows_3c);
  fc_ = alloc_floats(z.rows_4c);
  logits_ = alloc_floats(z.logits);
  ln_ = alloc_gemm_input(z.rows_c);
  att_in_ = bf16_ ? alloc_gemm_input(z.rows_c) : TensorOut(att_);
  fc_gelu_ = alloc_gemm_input(z.rows_4c);
  picked_ = alloc_gemm_input(z.picked);
  EMBER_ASSERT(allocated_bytes_ == footprint_bytes(config_, shape_, backend.matmul_precision()),
               "KvModel::footprint_bytes() disagrees with what the constructor allocated");
}

Backend::KvAttention KvModel::layer_attention(int l) const {
  Backend::KvAttention a = kv_attention(config_, shape_, l);
  a.rope_cos = rope_cos_, a.rope_sin = rope_sin_;
  return a;
}

KvModel::~KvModel() {
  if (int8_) backend_.set_int8_lm_head(false);
  for (void* ptr : allocations_) backend_.free(ptr);
}

void KvModel::forward(const int32_t* tokens, const int32_t* slots, const int32_t* pos, int n, const int* logit_rows,
                      int m, float* logits) {
  EMBER_ASSERT(n >= 1 && n <= shape_.max_rows, "a step's rows must be in [1, max_rows]");
  EMBER_ASSERT(m >= 0 && m <= shape_.max_logit_rows, "a step's logit rows must be in [0, max_logit_rows]");
  for (int i = 0; i < n; ++i)
    EMBER_ASSERT(slots[i] >= 0 && slots[i] < shape_.max_slots && pos[i] >= 0 && (rolling_ || pos[i] < shape_.max_T) &&
                     tokens[i] >= 0 && tokens[i] < config_.vocab_size,
                 "a row's slot, position or token is out of range");
  const int C = config_.n_embd, NH = config_.n_head, V = config_.vocab_size, L = config_.n_layer;
  Backend& be = backend_;
  be.copy_to_device(tokens_, tokens, size_t(n) * sizeof(int32_t));
  be.copy_to_device(slots_, slots, size_t(n) * sizeof(int32_t));
  be.copy_to_device(pos_, pos, size_t(n) * sizeof(int32_t));
  if (rope_cos_) {  // the rows' rotations, one table row per row's position, shared by every layer
    const int half = config_.head_dim() / 2;
    float *cos = rope_host_.data(), *sin = cos + rope_host_.size() / 2;
    for (int i = 0; i < n; ++i)
      rope_table(config_.rope_theta, half, pos[i], 1, cos + size_t(i) * half, sin + size_t(i) * half);
    be.copy_to_device(rope_cos_, cos, size_t(n) * half * sizeof(float));
    be.copy_to_device(rope_sin_, sin, size_t(n) * half * sizeof(float));
  }
  if (weights_changed_) {
    if (bf16_) be.cast_to_bf16(params_bf16_, params_, table_.total_numel());
    be.weights_changed();
  }
  weights_changed_ = false;
  auto P = [&](const ParamInfo& info) { return params_ + info.offset; };
  auto B = [&](int l, BlockParam bp) { return P(table_.block(l, bp)); };
  auto W = [&](int l, BlockParam bp) { return dense_w(table_.block(l, bp)); };

  // The same ops as GPT::forward, row by row: each layer's closing residual add is fused with the layernorm after it.
  be.encoder_forward_positions(x_, tokens_, pos_, P(table_.wte()), table_.wpe() ? P(*table_.wpe()) : nullptr, n, C);
  if (L == 0)
    be.layernorm_forward(ln_, mean_, rstd_, x_, P(table_.ln_f_weight()), P(table_.ln_f_bias()), n, C);
  else
    be.layernorm_forward(ln_, mean_, rstd_, x_, B(0, BLOCK_PARAM_LN1_W), B(0, BLOCK_PARAM_LN1_B), n, C);
  for (int l = 0; l < L; ++l) {
    be.matmul_forward(qkv_, ln_, W(l, BLOCK_PARAM_QKV_W), B(l, BLOCK_PARAM_QKV_B), n, C, 3 * C);
    const Backend::KvAttention a = layer_attention(l);
    be.kv_cache_write(k_cache_[l], v_cache_[l], qkv_, slots_, pos_, n, C, NH, a);
    be.attention_kv_forward(att_, qkv_, k_cache_[l], v_cache_[l], slots_, pos_, n, C, NH, a);
    if (bf16_) be.cast_to_bf16(att_in_.b16(), att_, size_t(n) * C);
    be.matmul_forward(proj_, att_in_, W(l, BLOCK_PARAM_PROJ_W), B(l, BLOCK_PARAM_PROJ_B), n, C, C);
    be.residual_layernorm_forward(x_, ln_, mean_, rstd_, x_, proj_, B(l, BLOCK_PARAM_LN2_W), B(l, BLOCK_PARAM_LN2_B), n,
                                  C);
    be.matmul_forward(fc_, ln_, W(l, BLOCK_PARAM_FC_W), B(l, BLOCK_PARAM_FC_B), n, C, 4 * C);
    be.gelu_forward(fc_gelu_, fc_, size_t(n) * 4 * C);
    be.matmul_forward(proj_, fc_gelu_, W(l, BLOCK_PARAM_FCPROJ_W), B(l, BLOCK_PARAM_FCPROJ_B), n, 4 * C, C);
    const bool last = l + 1 == L;
    be.residual_layernorm_forward(x_, ln_, mean_, rstd_, x_, proj_,
                                  last ? P(table_.ln_f_weight()) : B(l + 1, BLOCK_PARAM_LN1_W),
                                  last ? P(table_.ln_f_bias()) : B(l + 1, BLOCK_PARAM_LN1_B), n, C);
  }
  if (m == 0) return;
  // The lm_head only over the rows whose next token is wanted: at V = 50257 it is the largest GEMM of a step.
  for (int j = 0; j < m; ++j) {
    EMBER_ASSERT(logit_rows[j] >= 0 && logit_rows[j] < n, "a logit row must be one of the step's rows");
    const size_t row = bf16_ ? size_t(C) * sizeof(BFloat16) : size_t(C) * sizeof(float);
    be.copy(static_cast<char*>(picked_.ptr) + size_t(j) * row, static_cast<const char*>(ln_.ptr) + logit_rows[j] * row,
            row);
  }
  be.matmul_forward_transposed(logits_, picked_, dense_w(table_.wte()), m, C, V);
  be.copy_to_host(logits, logits_, size_t(m) * V * sizeof(float));
}

std::unique_ptr<KvModel> load_kv_model(const std::string& path, const CheckpointMeta& meta, Backend& backend,
                                       KvModelShape shape, size_t extra_bytes) {
  const ModelConfig& mc = meta.model;
  MemoryEstimate need;
  const MatmulPrecision p = backend.matmul_precision();
  need.weights = ParamTable(mc).total_numel() * sizeof(float) + KvModel::quantized_weight_copy_bytes(mc, p);
  need.activations =
      KvModel::footprint_bytes(mc, shape, p) + KvModel::quantized_weight_copy_bytes(mc, p) - need.weights;
  need.extra = extra_bytes + need.weights;  // the host copy of the weights read from the file
  require_memory("the model and its KV cache", need, backend, 1,
                 "lower --max-batch (cache slots) or the tokens per step, or use a machine with more memory");
  auto model = std::make_unique<KvModel>(mc, backend, shape);
  const std::vector<float> params = load_model_weights(path, mc);
  backend.copy_to_device(model->params(), params.data(), params.size() * sizeof(float));
  return model;
}

}  // namespace ember
