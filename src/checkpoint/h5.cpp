// HDF5 plumbing (implementation): every HDF5 call is checked and every handle closed on every path; a failure
// reads the error stack once and throws one ember::Error worded by the caller's H5Context.
#include "checkpoint/h5.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace ember {

herr_t collect_hdf5_error(unsigned n, const H5E_error2_t* err, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (n == 0 && err->desc) *out = err->desc;  // walking downward, frame 0 is the API call that failed
  return 0;
}

std::string hdf5_error_string() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_hdf5_error, &msg);
  return msg.empty() ? "HDF5 call failed" : msg;
}

namespace {

herr_t collect_frame(unsigned, const H5E_error2_t* err, void* client) {
  auto* f = static_cast<H5Failure*>(client);
  const std::string desc = err->desc ? err->desc : "";
  if (!desc.empty()) f->reason = one_line_reason(desc);  // walking downward: the last frame seen is the innermost
  if (desc.find("checksum") != std::string::npos || desc.find("Fletcher32") != std::string::npos) f->checksum = true;
  return 0;
}

void write_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value, const H5Context& ctx) {
  H5Handle space = scalar_space();
  H5Handle attr(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attr.get() < 0) throw_h5_failure(ctx.subject, std::string("cannot create attribute ") + name, ctx.write_hint);
  if (H5Awrite(attr.get(), mem_type, value) < 0)
    throw_h5_failure(ctx.subject, std::string("cannot write attribute ") + name, ctx.write_hint);
  if (attr.close() < 0) throw_h5_failure(ctx.subject, std::string("cannot close attribute ") + name, ctx.write_hint);
}

// Reads a string stored either variable- or fixed-length from an attribute or a scalar dataset, given its type;
// `read` performs the H5Aread/H5Dread into the memory type and buffer given.
template <typename ReadFn>
std::string read_string(hid_t file_type, ReadFn read, const std::string& what, const H5Context& ctx) {
  if (H5Tget_class(file_type) != H5T_STRING) throw Error(ctx.subject + ": " + what + " is not a string", ctx.read_hint);
  H5Handle mem = EMBER_H5_OWN(H5Tcopy(file_type), H5Tclose);
  const htri_t is_vlen = H5Tis_variable_str(file_type);
  EMBER_H5_CHECK(is_vlen);
  if (is_vlen) {
    char* p = nullptr;
    if (read(mem.get(), static_cast<void*>(&p)) < 0)
      throw_h5_failure(ctx.subject, "cannot read " + what, ctx.read_hint);
    std::string s = p ? p : "";
    if (p) EMBER_H5_CHECK(H5free_memory(p));
    return s;
  }
  const size_t n = H5Tget_size(file_type);
  if (n == 0) throw_h5_failure(ctx.subject, "cannot read the size of " + what, ctx.read_hint);
  std::string buf(n, '\0');
  if (read(mem.get(), static_cast<void*>(buf.data())) < 0)
    throw_h5_failure(ctx.subject, "cannot read " + what, ctx.read_hint);
  buf.resize(strnlen(buf.data(), n));
  return buf;
}

// Opens attribute `name` of `obj`, which must exist and hold one value.
H5Handle open_attr(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  if (!attr_exists(obj, name, where, ctx))
    throw Error(ctx.subject + ": attribute " + where + name + " is missing", ctx.read_hint);
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (attr.get() < 0) throw_h5_failure(ctx.subject, "cannot open attribute " + where + name, ctx.read_hint);
  H5Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (space.get() < 0) throw_h5_failure(ctx.subject, "cannot read attribute " + where + name, ctx.read_hint);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw Error(ctx.subject + ": attribute " + where + name + " is not a single value", ctx.read_hint);
  return attr;
}

// ORs into `space` the flat range [lo, hi) of the sub-array at leading coordinates `prefix`, whose shape is
// dims[prefix.size():]; see select_flat_range.
void or_flat_range(hid_t space, const std::vector<hsize_t>& dims, std::vector<hsize_t>& prefix, hsize_t lo,
                   hsize_t hi) {
  if (lo >= hi) return;
  const size_t d = prefix.size(), n = dims.size();
  hsize_t inner = 1;  // elements in one index step of dimension d
  for (size_t i = d + 1; i < n; ++i) inner *= dims[i];
  auto add_rows = [&](hsize_t first, hsize_t count) {  // indices [first, first + count) of dimension d, whole
    std::vector<hsize_t> start(prefix), extent(prefix.size(), 1);
    start.push_back(first);
    extent.push_back(count);
    for (size_t i = d + 1; i < n; ++i) {
      start.push_back(0);
      extent.push_back(dims[i]);
    }
    EMBER_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, extent.data(), nullptr));
  };
  auto recurse = [&](hsize_t row, hsize_t sub_lo, hsize_t sub_hi) {
    prefix.push_back(row);
    or_flat_range(space, dims, prefix, sub_lo, sub_hi);
    prefix.pop_back();
  };
  if (d + 1 == n) return add_rows(lo, hi - lo);
  hsize_t r0 = lo / inner;
  const hsize_t r1 = hi / inner;
  if (lo % inner != 0) {  // partial first row
    if (r0 == r1) return recurse(r0, lo % inner, hi % inner);
    recurse(r0, lo % inner, inner);
    ++r0;
  }
  if (r1 > r0) add_rows(r0, r1 - r0);
  if (hi % inner != 0) recurse(r1, 0, hi % inner);  // partial last row
}

herr_t collect_dataset(hid_t, const char* name,
                       const
#if H5_VERSION_GE(1, 12, 0)
                       H5O_info2_t* info,
#else
                       H5O_info_t* info,
#endif
                       void* client) {
  if (info->type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(client)->push_back(std::string("/") + name);
  return 0;
}

template <typename T>
T read_attr_num(hid_t obj, const char* name, hid_t mem_type, const std::string& where, const H5Context& ctx) {
  H5Handle attr = open_attr(obj, name, where, ctx);
  T v{};
  if (H5Aread(attr.get(), mem_type, &v) < 0)
    throw_h5_failure(ctx.subject, "cannot read attribute " + where + name, ctx.read_hint);
  return v;
}

}  // namespace

H5Handle own_h5(hid_t id, H5Handle::Closer closer, const char* stmt, const char* file, int line) {
  if (id < 0)
    fail_check("HDF5", stmt, hdf5_error_string(), file, line, "check the file path, permissions and free disk space");
  return H5Handle(id, closer);
}

H5Quiet::H5Quiet() {
  EMBER_H5_CHECK(H5Eget_auto2(H5E_DEFAULT, &func_, &data_));
  EMBER_H5_CHECK(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr));
}

H5Quiet::~H5Quiet() { (void)H5Eset_auto2(H5E_DEFAULT, func_, data_); }  // restoring cannot usefully fail

H5Failure last_h5_failure() {
  H5Failure f;
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_frame, &f) < 0 || f.reason.empty())
    f.reason = "no detail from HDF5";
  return f;
}

std::string one_line_reason(const std::string& desc) {
  std::string r = desc;
  const std::string key = "error message = '";
  const size_t at = desc.find(key);
  if (at != std::string::npos) {
    const size_t end = desc.find('\'', at + key.size());
    const size_t colon = desc.find(':');
    r = (colon != std::string::npos && colon < at ? desc.substr(0, colon) + ": " : std::string()) +
        desc.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
  }
  std::replace(r.begin(), r.end(), '\n', ' ');
  return r;
}

void throw_h5_failure(const std::string& subject, const std::string& what, const std::string& hint) {
  const H5Failure f = last_h5_failure();
  throw Error(subject + ": " + what + ": " + f.reason, hint);
}

H5Handle scalar_space() { return EMBER_H5_OWN(H5Screate(H5S_SCALAR), H5Sclose); }

H5Handle vlen_string_type() {
  H5Handle t = EMBER_H5_OWN(H5Tcopy(H5T_C_S1), H5Tclose);
  EMBER_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE));
  EMBER_H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8));
  return t;
}

void write_attr_i64(hid_t obj, const char* name, int64_t v, const H5Context& ctx) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, ctx);
}
void write_attr_u64(hid_t obj, const char* name, uint64_t v, const H5Context& ctx) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, ctx);
}
void write_attr_f32(hid_t obj, const char* name, float v, const H5Context& ctx) {
  write_attr(obj, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &v, ctx);
}

void write_attr_str(hid_t obj, const char* name, const std::string& v, const H5Context& ctx) {
  H5Handle t = vlen_string_type();
  const char* p = v.c_str();
  write_attr(obj, name, t.get(), t.get(), &p, ctx);
}

int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  return read_attr_num<int64_t>(obj, name, H5T_NATIVE_INT64, where, ctx);
}
uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  return read_attr_num<uint64_t>(obj, name, H5T_NATIVE_UINT64, where, ctx);
}
float read_attr_f32(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  return read_attr_num<float>(obj, name, H5T_NATIVE_FLOAT, where, ctx);
}

std::string read_attr_str(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  H5Handle attr = open_attr(obj, name, where, ctx);
  H5Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (type.get() < 0) throw_h5_failure(ctx.subject, "cannot read the type of attribute " + where + name, ctx.read_hint);
  return read_string(
      type.get(), [&](hid_t mem, void* buf) { return H5Aread(attr.get(), mem, buf); }, "attribute " + where + name,
      ctx);
}

bool attr_exists(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists < 0) throw_h5_failure(ctx.subject, "cannot look up attribute " + where + name, ctx.read_hint);
  return exists > 0;
}

int read_attr_int(hid_t obj, const char* name, const std::string& where, const H5Context& ctx) {
  const int64_t v = read_attr_i64(obj, name, where, ctx);
  if (v < 0 || v > INT32_MAX)
    throw Error(ctx.subject + ": attribute " + where + name + " = " + std::to_string(v) + " is out of range",
                ctx.read_hint);
  return int(v);
}

std::string read_dataset_str(hid_t dset, const std::string& what, const H5Context& ctx) {
  H5Handle type(H5Dget_type(dset), H5Tclose);
  if (type.get() < 0) throw_h5_failure(ctx.subject, "cannot read the type of " + what, ctx.read_hint);
  return read_string(
      type.get(), [&](hid_t mem, void* buf) { return H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }, what,
      ctx);
}

bool path_exists(hid_t file_id, const std::string& path, const H5Context& ctx) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    const htri_t e = H5Lexists(file_id, prefix.c_str(), H5P_DEFAULT);
    if (e < 0) throw_h5_failure(ctx.subject, "cannot look up " + prefix, ctx.read_hint);
    if (e == 0) return false;
  }
  return true;
}

H5Handle create_group(hid_t parent, const char* name, const H5Context& ctx) {
  H5Handle g(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) throw_h5_failure(ctx.subject, std::string("cannot create group ") + name, ctx.write_hint);
  return g;
}

H5Handle open_group(hid_t file_id, const char* path, const H5Context& ctx) {
  if (!path_exists(file_id, path, ctx)) throw Error(ctx.subject + ": group " + path + " is missing", ctx.read_hint);
  H5Handle g(H5Gopen2(file_id, path, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) throw_h5_failure(ctx.subject, std::string("cannot open group ") + path, ctx.read_hint);
  return g;
}

void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi) {
  EMBER_H5_CHECK(H5Sselect_none(space));
  if (lo >= hi) return;
  if (dims.empty()) {  // a scalar: its one element
    EMBER_H5_CHECK(H5Sselect_all(space));
    return;
  }
  std::vector<hsize_t> prefix;
  or_flat_range(space, dims, prefix, lo, hi);
}

H5Handle flat_range_memory_space(const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi) {
  hsize_t row = 1;  // elements in one index step of the first dimension
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
  std::vector<hsize_t> shape{hi - lo};
  if (dims.size() > 1 && row > 0 && lo % row == 0 && hi % row == 0) {
    shape.assign(dims.begin(), dims.end());
    shape[0] = (hi - lo) / row;
  }
  return EMBER_H5_OWN(H5Screate_simple(int(shape.size()), shape.data(), nullptr), H5Sclose);
}

std::vector<std::string> list_datasets(hid_t obj, const H5Context& ctx) {
  std::vector<std::string> out;
#if H5_VERSION_GE(1, 12, 0)
  const herr_t rc = H5Ovisit3(obj, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out, H5O_INFO_BASIC);
#else
  const herr_t rc = H5Ovisit2(obj, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out, H5O_INFO_BASIC);
#endif
  if (rc < 0) throw_h5_failure(ctx.subject, "cannot list the datasets", ctx.read_hint);
  return out;
}

uint64_t count_non_finite(const float* p, size_t n) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  return bad;
}

bool read_dataset_fully(hid_t dset, H5Failure& why, uint64_t* non_finite) {
  auto fail = [&why] {
    why = last_h5_failure();
    return false;
  };
  H5Handle type(H5Dget_type(dset), H5Tclose);
  if (type.get() < 0) return fail();
  H5Handle space(H5Dget_space(dset), H5Sclose);
  if (space.get() < 0) return fail();
  H5Handle mem(H5Tget_native_type(type.get(), H5T_DIR_ASCEND), H5Tclose);
  if (mem.get() < 0) return fail();
  const size_t elem = H5Tget_size(mem.get());
  const int ndims = H5Sget_simple_extent_ndims(space.get());
  const hssize_t npoints = H5Sget_simple_extent_npoints(space.get());
  if (elem == 0 || ndims < 0 || npoints < 0) return fail();
  if (npoints == 0) return true;
  const htri_t has_vlen = H5Tdetect_class(type.get(), H5T_VLEN);
  const htri_t vlen_str = H5Tget_class(type.get()) == H5T_STRING ? H5Tis_variable_str(type.get()) : 0;
  if (has_vlen < 0 || vlen_str < 0) return fail();
  if (has_vlen > 0 || vlen_str > 0 || ndims == 0) {
    // Variable-length data points into memory HDF5 allocates, which must be given back; such datasets are small
    // (strings), so one read of the whole.
    std::vector<unsigned char> buf(size_t(npoints) * elem);
    if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) return fail();
    if (has_vlen > 0 || vlen_str > 0) {
#if H5_VERSION_GE(1, 12, 0)
      EMBER_H5_CHECK(H5Treclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data()));
#else
      EMBER_H5_CHECK(H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data()));
#endif
    }
    return true;
  }
  std::vector<hsize_t> dims(static_cast<size_t>(ndims));
  if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) return fail();
  hsize_t row = 1;  // elements per index of dimension 0
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];
  const hsize_t block_rows = std::max<hsize_t>(1, (hsize_t(4) << 20) / elem / std::max<hsize_t>(row, 1));
  std::vector<unsigned char> buf(size_t(std::min(block_rows, dims[0]) * row) * elem);
  for (hsize_t r = 0; r < dims[0]; r += block_rows) {
    const hsize_t rows = std::min(block_rows, dims[0] - r);
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = r;
    count[0] = rows;
    if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0)
      return fail();
    const hsize_t n = rows * row;
    H5Handle mspace(H5Screate_simple(1, &n, nullptr), H5Sclose);
    if (mspace.get() < 0) return fail();
    if (H5Dread(dset, mem.get(), mspace.get(), space.get(), H5P_DEFAULT, buf.data()) < 0) return fail();
    if (non_finite && H5Tget_class(mem.get()) == H5T_FLOAT) {
      if (elem == sizeof(float)) {
        *non_finite += count_non_finite(reinterpret_cast<const float*>(buf.data()), size_t(n));
      } else if (elem == sizeof(double)) {
        const double* d = reinterpret_cast<const double*>(buf.data());
        for (size_t i = 0; i < size_t(n); ++i) *non_finite += !std::isfinite(d[i]);
      }
    }
  }
  return true;
}

std::string h5_type_name(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "vlen";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_REFERENCE:
      return "reference";
    case H5T_TIME:
      return "time";
    default:
      return "unknown";
  }
}

}  // namespace ember
