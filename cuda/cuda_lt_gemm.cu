// CUDA backend: cuBLASLt for the dense layers (cuda_ops.h's LtGemm): the GEMMs with a fused bias or bias-gradient
// epilogue and the fp8 GEMMs, each call shape's descriptors and heuristic answer made once and kept. Count-only (the
// cost ledger) it reports each GEMM as accepted and touches no device.
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes 256-byte alignment
// unless told otherwise, and parameter tensors sit at arbitrary float offsets in the arena.
uint32_t alignment_of(const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

// The descriptors of one cuBLASLt call shape, destroyed with it (or on any path out while it is being built).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {
// cuBLASLt's first choice for the call `desc` describes, with its workspace and the operands' alignments.
cublasStatus_t heuristic(cublasLtHandle_t handle, LtDescriptors& desc, size_t workspace_bytes, const void* a,
                         const void* b, const void* d, cublasLtMatmulHeuristicResult_t* result, int* found) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(a));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(b));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(d));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(d));
  return cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, 1, result, found);
}
}  // namespace

// A call shape's answer: whether cuBLASLt has a kernel for it, which, and the descriptors it was chosen for (built
// once, not on every call).
struct LtGemm::Plan {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::unique_ptr<LtDescriptors> desc;
};
struct LtGemm::Cache {
  std::map<std::array<int64_t, 16>, Plan> plans;
};

LtGemm::LtGemm() : stream_(nullptr), workspace_(nullptr), workspace_bytes_(0), cache_(nullptr) {}

LtGemm::LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes), cache_(new Cache) {
  cublasLtHandle_t handle = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
}

LtGemm::~LtGemm() {
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  delete cache_;
}

bool LtGemm::run(Epilogue epilogue, bool ab_bf16, bool trans_a, bool trans_b, int m, int n, int k, const void* a,
                 int lda, const void* b, int ldb, float beta, void* d, bool d_bf16, int ldd, void* bias) {
  EMBER_ASSERT(ab_bf16 || !d_bf16, "matmul: a bf16 output needs bf16 inputs");
  // The epilogue reads the bias (stored as D is), or writes the bias gradient (m floats).
  const double bias_bytes = double(m) * (epilogue == Epilogue::bias ? (d_bf16 ? 2.0 : 4.0) : 4.0);
  const bool with_bias = epilogue == Epilogue::bias;
  if (!handle_) {  // count-only: the GEMM as cuBLASLt would run it, for the cost ledger
    report_gemm(with_bias ? "gemm+bias" : "gemm+bias_grad", ab_bf16, m, n, k, beta, d_bf16, with_bias ? bias_bytes : 0,
                with_bias ? 0 : bias_bytes);
    return true;
  }
  const auto handle = static_cast<cublasLtHandle_t>(handle_);
  const std::array<int64_t, 16> key = {
      int64_t(epilogue), ab_bf16,         d_bf16,          trans_a,         trans_b,           m, n, k, lda, ldb, ldd,
      beta != 0.0f,      alignment_of(a), alignment_of(b), alignment_of(d), alignment_of(bias)};
  auto it = cache_->plans.find(key);
  if (it == cache_->plans.end()) {
    // A new call shape: its descriptors and the heuristic's answer, kept for every later call of the shape.
    auto desc = std::make_unique<LtDescriptors>();
    EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_TRANSA, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_TRANSB, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    const cublasLtEpilogue_t ep = epilogue == Epilogue::bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADA;
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(ep));
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // read by the heuristic for its alignment
    // Layouts as stored: A is (m, k), or (k, m) when transposed; B is (k, n), or (n, k).
    const cudaDataType ab_type = ab_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->a, ab_type, trans_a ? k : m, trans_a ? m : k, lda));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->b, ab_type, trans_b ? n : k, trans_b ? k : n, ldb));
    // D (and the bias, which cuBLASLt takes in D's type) in fp32 or bf16.
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->d, d_bf16 ? CUDA_R_16BF : CUDA_R_32F, m, n, ldd));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t rc = heuristic(handle, *desc, workspace_bytes_, a, b, d, &result, &found);
    // NOT_SUPPORTED: no kernel for this epilogue with these types, shape or alignment. Any other refusal also leaves
    // the call to the plain path, which computes the same thing, but is worth a line in the log.
    if (rc != CUBLAS_STATUS_SUCCESS && rc != CUBLAS_STATUS_NOT_SUPPORTED)
      log_warn("cuBLASLt heuristic refused a %dx%dx%d GEMM with a fused %s epilogue (%s); using cuBLAS and a kernel", m,
               n, k, epilogue == Epilogue::bias ? "bias" : "bias-gradient", cublasGetStatusString(rc));
    Plan plan;
    plan.found = rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan.found) plan.algo = result.algo, plan.desc = std::move(desc);
    it = cache_->plans.emplace(key, std::move(plan)).first;
  }
  if (!it->second.found) return false;
  // Only the bias pointer differs between calls of one shape (its alignment is part of the key).
  const LtDescriptors& desc = *it->second.desc;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f;
  const cublasStatus_t rc = cublasLtMatmul(handle, desc.op, &alpha, a, desc.a, b, desc.b, &beta, d, desc.d, d, desc.d,
                                           &it->second.algo, workspace_, workspace_bytes_, stream_);
  if (rc == CUBLAS_STATUS_SUCCESS) {
    report_gemm(with_bias ? "gemm+bias" : "gemm+bias_grad", ab_bf16, m, n, k, beta, d_bf16, with_bias ? bias_bytes : 0,
                with_bias ? 0 : bias_bytes);
    return true;
  }
  // A heuristic's answer that the call itself then refuses (cuBLASLt does not promise it cannot happen): nothing was
  // launched, so the plain path computes the result instead, from now on for this call shape.
  if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_ARCH_MISMATCH && rc != CUBLAS_STATUS_INVALID_VALUE)
    EMBER_CUBLAS_CHECK(rc);
  log_warn(
      "cuBLASLt refused a %dx%dx%d GEMM with a fused %s epilogue that its heuristic offered (%s); using cuBLAS "
      "and a kernel",
      m, n, k, epilogue == Epilogue::bias ? "bias" : "bias-gradient", cublasGetStatusString(rc));
  it->second.found = false;
  return false;
}

void LtGemm::run_fp8(int m, int n, int k, const uint8_t* a, Fp8Format fa, int lda, const uint8_t* b, Fp8Format fb,
                     int ldb, float* d, int ldd) {
  EMBER_ASSERT(m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && lda % 16 == 0 && ldb % 16 == 0 && ldd % 16 == 0,
               "fp8 GEMM: m, n, k and the leading dimensions must be multiples of 16");
  EMBER_ASSERT(handle_, "fp8 GEMM: a count-only cuBLASLt runs nothing");
  const auto handle = static_cast<cublasLtHandle_t>(handle_);
  const auto type = [](Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
  const std::array<int64_t, 16> key = {
      2 + int64_t(fa), int64_t(fb),     0, 1, 0, m, n, k, lda, ldb, ldd, 0, alignment_of(a),
      alignment_of(b), alignment_of(d), 0};
  auto it = cache_->plans.find(key);
  if (it == cache_->plans.end()) {
    auto desc = std::make_unique<LtDescriptors>();
    EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_desc(desc->op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->a, type(fa), k, m, lda));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->b, type(fb), k, n, ldb));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc->d, CUDA_R_32F, m, n, ldd));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t rc = heuristic(handle, *desc, workspace_bytes_, a, b, d, &result, &found);
    Plan plan;
    plan.found = rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (!plan.found)
      throw_error("cuBLASLt has no fp8 GEMM for " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                      std::to_string(k) + " (" + cublasGetStatusString(rc) + ")",
                  "fp8 products need an sm_89 or newer GPU and cuBLAS 12 or newer; use training.precision = bf16");
    plan.algo = result.algo, plan.desc = std::move(desc);
    it = cache_->plans.emplace(key, std::move(plan)).first;
  }
  const LtDescriptors& desc = *it->second.desc;
  const float alpha = 1.0f, beta = 0.0f;
  EMBER_CUBLAS_CHECK(cublasLtMatmul(handle, desc.op, &alpha, a, desc.a, b, desc.b, &beta, d, desc.d, d, desc.d,
                                    &it->second.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace cuda
}  // namespace ember
