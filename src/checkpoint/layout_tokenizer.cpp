// The checkpoint's /tokenizer group: the tokenizer the model was trained with, its files stored byte for byte as
// uint8 datasets, so generate and eval rebuild it from the checkpoint alone and h5py users can take the files out.
#include <hdf5.h>

#include <string>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/layout.h"
#include "core/error.h"

namespace ember::checkpoint_detail {
namespace {

constexpr const char* GROUP = "/tokenizer";

// A member of /tokenizer is named after its file: one path component, so HDF5 cannot read it as a nested path.
bool valid_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

[[noreturn]] void fail_member(const std::string& file, const std::string& what) {
  throw Error("checkpoint " + file + ": " + what, HINT_DAMAGED);
}

// Reads the 1-d uint8 dataset `name` of the open group `g` whole.
std::string read_bytes(hid_t g, const std::string& name, const std::string& file) {
  const std::string path = std::string(GROUP) + "/" + name;
  H5Handle dset(H5Dopen2(g, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset.get() < 0) fail_io(file, "cannot open " + path + " (every member of /tokenizer is a dataset)", HINT_DAMAGED);
  H5Handle type(H5Dget_type(dset.get()), H5Tclose);
  H5Handle space(H5Dget_space(dset.get()), H5Sclose);
  if (type.get() < 0 || space.get() < 0) fail_io(file, "cannot read the type of dataset " + path, HINT_DAMAGED);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
      H5Sget_simple_extent_ndims(space.get()) != 1)
    fail_member(file, "dataset " + path + " is " + h5_type_name(type.get()) + " of rank " +
                          std::to_string(H5Sget_simple_extent_ndims(space.get())) +
                          ", expected a 1-d uint8 array holding the file's bytes");
  hsize_t n = 0;
  if (H5Sget_simple_extent_dims(space.get(), &n, nullptr) < 0)
    fail_io(file, "cannot read the shape of dataset " + path, HINT_DAMAGED);
  std::string bytes(size_t(n), '\0');
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    fail_io(file, "cannot read dataset " + path, HINT_DAMAGED);
  return bytes;
}

}  // namespace

size_t tokenizer_bytes(const CheckpointTokenizer& tokenizer) {
  size_t n = 0;
  for (const auto& [name, contents] : tokenizer.files) n += name.size() + contents.size();
  return n;
}

void write_tokenizer(hid_t file_id, const CheckpointTokenizer& tokenizer, const std::string& file) {
  const H5Context ctx = h5_context(file);
  H5Handle g = create_group(file_id, GROUP, ctx);
  write_attr_str(g.get(), "kind", tokenizer.kind, ctx);
  write_attr_str(g.get(), "fingerprint", tokenizer.fingerprint, ctx);
  write_attr_i64(g.get(), "vocab_size", tokenizer.vocab_size, ctx);
  for (const auto& [name, contents] : tokenizer.files) {
    EMBER_ASSERT(valid_file_name(name), "tokenizer file name \"" + name + "\" is not a plain file name");
    const std::string path = std::string(GROUP) + "/" + name;
    const hsize_t n = contents.size();
    H5Handle space = EMBER_H5_OWN(H5Screate_simple(1, &n, nullptr), H5Sclose);
    H5Handle dcpl = EMBER_H5_OWN(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    // No modification times, as for the tensors: identical checkpoints give identical files.
    EMBER_H5_CHECK(H5Pset_obj_track_times(dcpl.get(), false));
    H5Handle dset(H5Dcreate2(g.get(), name.c_str(), H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                  H5Dclose);
    if (dset.get() < 0) fail_io(file, "cannot create dataset " + path, HINT_WRITE);
    if (n > 0 && H5Dwrite(dset.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, contents.data()) < 0)
      fail_io(file, "cannot write dataset " + path, HINT_WRITE);
    if (dset.close() < 0) fail_io(file, "cannot close dataset " + path, HINT_WRITE);
  }
}

std::optional<CheckpointTokenizer> read_tokenizer(hid_t file_id, const std::string& file) {
  const H5Context ctx = h5_context(file);
  if (!path_exists(file_id, GROUP, ctx)) return std::nullopt;
  H5Handle g = open_group(file_id, GROUP, ctx);
  CheckpointTokenizer t;
  t.kind = read_attr_str(g.get(), "kind", "/tokenizer:", ctx);
  if (!parse_tokenizer_kind(t.kind))
    fail_member(file, "attribute /tokenizer:kind is \"" + t.kind + "\", expected \"bytes\" or \"bpe\"");
  t.fingerprint = read_attr_str(g.get(), "fingerprint", "/tokenizer:", ctx);
  if (t.fingerprint.empty()) fail_member(file, "attribute /tokenizer:fingerprint is empty");
  t.vocab_size = read_attr_int(g.get(), "vocab_size", "/tokenizer:", ctx);
  if (t.vocab_size < 1) fail_member(file, "attribute /tokenizer:vocab_size is 0, expected at least 1");
  H5G_info_t info{};
  if (H5Gget_info(g.get(), &info) < 0) fail_io(file, "cannot list group /tokenizer", HINT_DAMAGED);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) fail_io(file, "cannot list group /tokenizer", HINT_DAMAGED);
    std::vector<char> name(size_t(len) + 1, '\0');
    if (H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) < 0)
      fail_io(file, "cannot list group /tokenizer", HINT_DAMAGED);
    const std::string n(name.data(), size_t(len));
    t.files[n] = read_bytes(g.get(), n, file);
  }
  if (t.kind == tokenizer_kind_name(TokenizerKind::bytes) && !t.files.empty())
    fail_member(file, "group /tokenizer holds files but its kind is \"bytes\" (the byte tokenizer has none)");
  return t;
}

}  // namespace ember::checkpoint_detail
