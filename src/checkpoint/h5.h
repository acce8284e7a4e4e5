// HDF5 plumbing for any file format built on the plain C API: an owning handle, error-stack silencing and reading,
// and scalar attribute, string and group helpers whose failures become one ember::Error naming the file and action.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ember {

// HDF5's message for the call that failed last (the first frame of its error stack).
std::string hdf5_error_string();

}  // namespace ember

#define EMBER_H5_CHECK(stmt)                                                  \
  EMBER_CHECK_GEN("HDF5", stmt, ember_rc_ >= 0, ::ember::hdf5_error_string(), \
                  "check the file path, permissions and free disk space")

namespace ember {

// Owns one HDF5 identifier (file, group, dataset, dataspace, datatype, attribute, property list) and closes it with
// the matching H5?close. Destruction closes silently (it may run while unwinding); close() reports the result for
// the places where a failed close means lost data (the file).
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  herr_t close() {
    herr_t rc = id_ >= 0 ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }

 private:
  void reset() {
    if (id_ >= 0) (void)closer_(id_);  // nothing useful to do with a failed close while unwinding
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Takes ownership of the id an HDF5 call returned; a negative id fails like EMBER_H5_CHECK (statement, file:line,
// HDF5's message). Use through EMBER_H5_OWN, which fills in the statement and location.
H5Handle own_h5(hid_t id, H5Handle::Closer closer, const char* stmt, const char* file, int line);
#define EMBER_H5_OWN(stmt, closer) ::ember::own_h5((stmt), (closer), #stmt, __FILE__, __LINE__)

// Turns off HDF5's automatic error-stack printing for one scope (restored afterwards): failures become one clean
// ember::Error line instead of a screenful of HDF5 frames. The stack itself is still recorded (last_h5_failure).
class H5Quiet {
 public:
  H5Quiet();
  ~H5Quiet();
  H5Quiet(const H5Quiet&) = delete;
  H5Quiet& operator=(const H5Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// What the HDF5 error stack says about the last failure: the innermost (most specific) reason, and whether any
// frame reports a checksum mismatch (Fletcher32 on raw data, or the metadata checksums of the v1.8 format).
struct H5Failure {
  std::string reason;
  bool checksum = false;
};

// Reads the current error stack; the reason is "no detail from HDF5" when the stack holds none.
H5Failure last_h5_failure();

// One line out of an HDF5 error description: file-driver messages span lines and list every syscall argument
// ("file write failed: time = ...\n, filename = ..., errno = 28, error message = 'No space left on device', ...");
// those keep the summary and the OS message.
std::string one_line_reason(const std::string& desc);

// How failures in one file are worded: "<subject>: <what>: <HDF5's reason>", with the hint for reads or writes.
struct H5Context {
  std::string subject;     // names the file, e.g. "checkpoint run/step_00000100.h5"
  std::string read_hint;   // for failures while reading (a damaged or foreign file)
  std::string write_hint;  // for failures while writing (permissions, free space)
};

// Throws ember::Error("<subject>: <what>: <reason from last_h5_failure()>", hint).
[[noreturn]] void throw_h5_failure(const std::string& subject, const std::string& what, const std::string& hint);

// A scalar dataspace, for single-value attributes and datasets.
H5Handle scalar_space();

// The variable-length UTF-8 string type: h5py reads it as str, h5dump prints it as text.
H5Handle vlen_string_type();

// Write a scalar attribute `name` on `obj` (stored little-endian; strings as vlen_string_type()).
void write_attr_i64(hid_t obj, const char* name, int64_t v, const H5Context& ctx);
void write_attr_u64(hid_t obj, const char* name, uint64_t v, const H5Context& ctx);
void write_attr_f32(hid_t obj, const char* name, float v, const H5Context& ctx);
void write_attr_str(hid_t obj, const char* name, const std::string& v, const H5Context& ctx);

// Read attribute `name` of `obj`, which must exist and hold one value; `where` prefixes the name in messages
// ("/" or "/optimizer:" gives "attribute /step", "attribute /optimizer:lr"). Strings may be variable- or
// fixed-length, as other tools may write either.
int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);
uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);
float read_attr_f32(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);
std::string read_attr_str(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);

// True when `obj` has an attribute `name` (optional attributes: a reader applies its default when absent); a failed
// lookup is an error naming `where` and `name`.
bool attr_exists(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);

// Reads an integer attribute as read_attr_i64 does and checks it lies in [0, INT32_MAX].
int read_attr_int(hid_t obj, const char* name, const std::string& where, const H5Context& ctx);

// Reads the string held by the single-element dataset `dset`, described by `what` ("dataset /config") in messages.
std::string read_dataset_str(hid_t dset, const std::string& what, const H5Context& ctx);

// True when every component of the absolute `path` exists (H5Lexists alone fails on a missing intermediate group).
bool path_exists(hid_t file_id, const std::string& path, const H5Context& ctx);

// Creates group `name` under `parent`.
H5Handle create_group(hid_t parent, const char* name, const H5Context& ctx);

// Opens the group at absolute `path`; a missing group is an error naming it.
H5Handle open_group(hid_t file_id, const char* path, const H5Context& ctx);

// Selects in `space` (a simple dataspace of shape `dims`) the elements whose row-major flat index lies in [lo, hi):
// a flat range of an N-d array is at most 2N-1 hyperslabs (partial first row, whole rows, partial last row, each
// partial row split the same way one dimension down). An empty range selects nothing. HDF5 walks any selection in
// row-major order, so the selected elements map one to one onto a contiguous buffer of hi - lo values.
void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi);

// The memory dataspace of the hi - lo contiguous values that select_flat_range's selection maps onto (lo < hi): shaped
// like that selection where it is whole rows of the first dimension (a whole tensor, or a shard of whole rows), 1-D
// otherwise. Selections of the same shape let HDF5 map chunks by block arithmetic; a 1-D buffer against an N-d
// selection makes it map every element on its own, which took most of a 124M checkpoint's 18 s.
H5Handle flat_range_memory_space(const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi);

// Absolute paths of every dataset under the object `obj` (a file or a group), in HDF5's name order.
std::vector<std::string> list_datasets(hid_t obj, const H5Context& ctx);

// Reads every element of `dset` and discards it, in blocks of whole rows of at most ~4 MiB, so filters (Fletcher32)
// verify every chunk with bounded memory. Returns false when a call fails, with `why` taken from the error stack at
// that call (later calls, even closes, clear the stack). With `non_finite`, a floating-point dataset's NaN and
// infinite elements are counted into it on the way (0 for other types).
bool read_dataset_fully(hid_t dset, H5Failure& why, uint64_t* non_finite = nullptr);

// Number of elements of p[0 .. n) that are NaN or infinite.
uint64_t count_non_finite(const float* p, size_t n);

// A short name for an HDF5 datatype as users of NumPy know it: "float32", "int64", "uint8", "string", or the
// class ("compound", ...) for anything else.
std::string h5_type_name(hid_t type);

}  // namespace ember
