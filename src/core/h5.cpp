// HDF5 plumbing (implementation): every HDF5 call is checked and every handle closed on every path; a failure
// reads the error stack once and throws one ember::Error worded by the caller's H5Context.
#include "core/h5.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace ember {
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
  const htri_t exists = H5Aexists(obj, name);
  if (exists < 0) throw_h5_failure(ctx.subject, "cannot look up attribute " + where + name, ctx.read_hint);
  if (exists == 0) throw Error(ctx.subject + ": attribute " + where + name + " is missing", ctx.read_hint);
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (attr.get() < 0) throw_h5_failure(ctx.subject, "cannot open attribute " + where + name, ctx.read_hint);
  H5Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (space.get() < 0) throw_h5_failure(ctx.subject, "cannot read attribute " + where + name, ctx.read_hint);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw Error(ctx.subject + ": attribute " + where + name + " is not a single value", ctx.read_hint);
  return attr;
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

}  // namespace ember
