// Per-ISA clones of hot loops. The default -march=x86-64 allows only SSE2, while vectorised loops (the exp-heavy
// softmax and GELU, int8 rounding with roundps) run 2-4x faster on wider vectors, so such a loop's function is compiled
// three times (AVX-512, AVX2+FMA, baseline SSE2) and glibc's ifunc picks one when the library loads. The pick is fixed
// per machine, so results stay bitwise reproducible on it (clones may contract a*b+c into FMAs, so they can differ
// from another machine's in the last bits, as OpenBLAS does anyway; files compiled with -ffp-contract=off never do).
// A native build (EMBER_NATIVE) has no clones: it targets the build machine whole.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EMBER_NATIVE_BUILD)
#define EMBER_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_CPU_CLONES
#endif
