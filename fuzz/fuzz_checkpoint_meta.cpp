// Fuzz target: checkpoint metadata, structure-aware. Each input rewrites the attributes of a valid checkpoint
// ($EMBER_FUZZ_CHECKPOINT, default the sync fixture of tests/fixtures): for each attribute of each object, in
// order, the input says keep it, delete it, or replace it by a value it supplies (an integer, a float among which
// NaN and inf, a string, or an array); the file is then read as every command reads it (read_checkpoint_meta,
// read_checkpoint_tokenizer, verify_checkpoint). Only ember::Error may come out. (Fuzzing HDF5's own file parser is
// HDF5's business: the file stays well-formed.)
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>

#include "checkpoint/checkpoint.h"
#include "fuzz_util.h"

using namespace ember;

namespace {

std::string g_seed;  // the checkpoint's bytes

struct Attribute {
  std::string object, name;
};

herr_t collect_attribute(hid_t, const char* name, const H5A_info_t*, void* out) {
  auto* list = static_cast<std::pair<std::string, std::vector<Attribute>*>*>(out);
  list->second->push_back({list->first, name});
  return 0;
}

herr_t collect_object(hid_t root, const char* name, const H5O_info_t*, void* out) {
  auto* attributes = static_cast<std::vector<Attribute>*>(out);
  std::pair<std::string, std::vector<Attribute>*> ctx{name, attributes};
  H5Aiterate_by_name(root, name, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attribute, &ctx, H5P_DEFAULT);
  return 0;
}

void write_attribute(hid_t object, const std::string& name, FuzzedDataProvider& in) {
  hid_t space = H5Screate(H5S_SCALAR);
  switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0: {
      const int64_t v = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-4, 4096) : in.ConsumeIntegral<int64_t>();
      hid_t a = H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT64, &v);
      H5Aclose(a);
      break;
    }
    case 1: {
      static const double kOdd[] = {std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(),
                                    0.0,
                                    -0.0,
                                    1e300,
                                    -1e-300};
      const double v = in.ConsumeBool() ? kOdd[in.ConsumeIntegralInRange<size_t>(0, std::size(kOdd) - 1)]
                                        : in.ConsumeFloatingPoint<double>();
      hid_t a = H5Acreate2(object, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
      H5Aclose(a);
      break;
    }
    case 2: {
      const std::string v = in.ConsumeRandomLengthString(64);
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, std::max<size_t>(1, v.size()));
      hid_t a = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, type, v.empty() ? "" : v.data());
      H5Aclose(a);
      H5Tclose(type);
      break;
    }
    case 3: {
      const char* v = in.ConsumeBool() ? "sync" : "async";  // the words the mode and role attributes take
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, H5T_VARIABLE);
      hid_t a = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, type, &v);
      H5Aclose(a);
      H5Tclose(type);
      break;
    }
    default: {
      const hsize_t n = in.ConsumeIntegralInRange<hsize_t>(0, 4);
      hid_t arr = H5Screate_simple(1, &n, nullptr);
      int64_t v[4] = {in.ConsumeIntegral<int64_t>(), 1, 2, 3};
      hid_t a = H5Acreate2(object, name.c_str(), H5T_STD_I64LE, arr, H5P_DEFAULT, H5P_DEFAULT);
      if (n > 0) H5Awrite(a, H5T_NATIVE_INT64, v);
      H5Aclose(a);
      H5Sclose(arr);
    }
  }
  H5Sclose(space);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("EMBER_FUZZ_CHECKPOINT");
  const std::string path = env ? env : EMBER_SOURCE_DIR "/tests/fixtures/checkpoint_v1_sync_np2.h5";
  std::ifstream f(path, std::ios::binary);
  g_seed.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (g_seed.empty()) {
    std::fprintf(stderr, "fuzz_checkpoint_meta: cannot read %s (set EMBER_FUZZ_CHECKPOINT)\n", path.c_str());
    std::abort();
  }
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string path = fuzz::scratch_file("checkpoint.h5", g_seed);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) fuzz::broken("the seed checkpoint does not open");
  std::vector<Attribute> attributes;
  H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, collect_object, &attributes, H5O_INFO_BASIC);
  for (const Attribute& a : attributes) {
    if (in.remaining_bytes() == 0) break;
    const int op = in.ConsumeIntegralInRange(0, 7);  // mostly kept, so that several changes meet
    if (op >= 3) continue;
    hid_t object = H5Oopen(file, a.object.c_str(), H5P_DEFAULT);
    H5Adelete(object, a.name.c_str());
    if (op > 0) write_attribute(object, a.name, in);
    H5Oclose(object);
  }
  H5Fclose(file);
  try {
    (void)read_checkpoint_meta(path);
    (void)read_checkpoint_tokenizer(path);
    verify_checkpoint(path);
  } catch (const Error&) {
  }
  return 0;
}
