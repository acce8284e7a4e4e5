// Exact int8 GEMM over oneDNN's matmul primitive (s8 x s8, summed in s32, written as f32), with a primitive per shape
// kept for reuse, and the double-precision fallback for CPUs whose int8 kernels could saturate (x86 without VNNI:
// vpmaddubsw sums pairs in int16).
#include "backend/cpu/cpu_gemm_int8.h"

#include <cblas.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace ember::cpu {

namespace {

using dnnl::memory;

bool has_exact_int8_kernels(dnnl::cpu_isa isa) {
  return isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16 ||
         isa == dnnl::cpu_isa::avx512_core_amx || isa == dnnl::cpu_isa::avx2_vnni;
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    default:
      return "no VNNI";
  }
}

// One engine and stream for the process, and the primitives made so far, by shape and layout. Training uses a few
// dozen shapes; decoding adds one per prompt length, so the map is emptied when it grows past kMaxPrimitives.
struct Int8Gemms {
  using Key = std::tuple<bool, bool, int, int, int, int, int, int>;
  static constexpr size_t kMaxPrimitives = 256;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  bool exact = has_exact_int8_kernels(dnnl::get_effective_cpu_isa());
  std::mutex mutex;
  struct Gemm {
    memory::desc a, b, c, scratchpad;
    dnnl::matmul matmul;
  };
  std::map<Key, Gemm> primitives;
  // The primitives' working space (a transposed operand's repacked copy, for one), ours rather than oneDNN's: with
  // its default a call allocates it and frees it again, and a buffer of tens of MB (the lm_head's weight in a
  // decoding step) comes back from the kernel as fresh zeroed pages every time. Grown to the largest one needs.
  std::vector<char> scratchpad;

  Gemm& primitive(const Key& key) {
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    if (primitives.size() >= kMaxPrimitives) primitives.clear();
    const auto [trans_a, trans_b, M, N, K, lda, ldb, ldc] = key;
    // Strides say the layout: a transposed operand is the same memory read with its strides swapped.
    const memory::desc a({M, K}, memory::data_type::s8, trans_a ? memory::dims{1, lda} : memory::dims{lda, 1});
    const memory::desc b({K, N}, memory::data_type::s8, trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    const memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    const memory::desc pad = pd.scratchpad_desc();
    if (pad.get_size() > scratchpad.size()) scratchpad.resize(pad.get_size());
    return primitives.emplace(key, Gemm{a, b, c, pad, dnnl::matmul(pd)}).first->second;
  }
};

Int8Gemms& gemms() {
  static Int8Gemms g;
  return g;
}

}  // namespace

void gemm_s8(bool trans_a, bool trans_b, int M, int N, int K, const int8_t* A, int lda, const int8_t* B, int ldb,
             float* C, int ldc) {
  EMBER_ASSERT(K <= kMaxInt8GemmK, "an int8 GEMM over " + std::to_string(K) + " terms could overflow int32");
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) C[size_t(m) * ldc + n] = 0.0f;
    return;
  }
  Int8Gemms& g = gemms();
  if (!g.exact) {
    gemm_s8_by_doubles(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    return;
  }
  std::lock_guard<std::mutex> lock(g.mutex);
  Int8Gemms::Gemm& gemm = g.primitive({trans_a, trans_b, M, N, K, lda, ldb, ldc});
  memory a(gemm.a, g.engine, const_cast<int8_t*>(A));
  memory b(gemm.b, g.engine, const_cast<int8_t*>(B));
  memory c(gemm.c, g.engine, C);
  memory pad(gemm.scratchpad, g.engine, g.scratchpad.data());
  gemm.matmul.execute(g.stream,
                      {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}});
  g.stream.wait();
}

// Every partial sum of at most kMaxInt8GemmK products is exact in double; the conversion to float rounds it once.
void gemm_s8_by_doubles(bool trans_a, bool trans_b, int M, int N, int K, const int8_t* A, int lda, const int8_t* B,
                        int ldb, float* C, int ldc) {
  const size_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  // The widened operands and the sums, kept per thread between calls (the model's products come back every step).
  thread_local std::vector<double> a, b, c;
  a.resize(a_rows * a_cols), b.resize(b_rows * b_cols), c.resize(size_t(M) * N);
  for (size_t r = 0; r < a_rows; ++r)
    for (size_t k = 0; k < a_cols; ++k) a[r * a_cols + k] = A[r * size_t(lda) + k];
  for (size_t r = 0; r < b_rows; ++r)
    for (size_t k = 0; k < b_cols; ++k) b[r * b_cols + k] = B[r * size_t(ldb) + k];
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0,
              a.data(), int(a_cols), b.data(), int(b_cols), 0.0, c.data(), N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) C[size_t(m) * ldc + n] = float(c[size_t(m) * N + n]);
}

std::string int8_gemm_engine() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (has_exact_int8_kernels(isa)) return std::string("oneDNN (") + isa_name(isa) + ")";
  return "OpenBLAS dgemm (exact; this CPU has no VNNI, where oneDNN's int8 kernels could saturate)";
}

}  // namespace ember::cpu
