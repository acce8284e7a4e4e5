// Checkpoint metadata is checked like its data: a valid file, then one attribute or one tensor value damaged at a
// time through the HDF5 C API; each read must fail naming the attribute (with its value) or the dataset. Also the
// relations between counters a resume relies on, and that the files an older ember wrote still pass them.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <limits>

#include "checkpoint/h5.h"
#include "parallel/host_collectives.h"
#include "train/run_checkpoint.h"
#include "train/run_config.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

using namespace checkpoint_test;

// Opens `path` for writing, runs `fn` on it and closes it (a failed call fails the test).
void edit_file(const std::string& path, const std::function<void(hid_t)>& fn) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  fn(f);
  ASSERT_GE(H5Fclose(f), 0);
}

// Replaces the scalar attribute `name` of object `obj` (a path) with one of `type` holding *value.
void set_attr(const std::string& path, const char* obj, const char* name, hid_t type, const void* value) {
  edit_file(path, [&](hid_t f) {
    if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) ASSERT_GE(H5Adelete_by_name(f, obj, name, H5P_DEFAULT), 0);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate_by_name(f, obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(a, 0) << obj << " " << name;
    EXPECT_GE(H5Awrite(a, type, value), 0);
    H5Aclose(a);
    H5Sclose(space);
  });
}

void set_i64(const std::string& path, const char* obj, const char* name, int64_t v) {
  set_attr(path, obj, name, H5T_STD_I64LE, &v);
}
void set_f32(const std::string& path, const char* obj, const char* name, float v) {
  set_attr(path, obj, name, H5T_IEEE_F32LE, &v);
}
void set_str(const std::string& path, const char* obj, const char* name, const std::string& v) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const char* s = v.c_str();
  set_attr(path, obj, name, type, &s);
  H5Tclose(type);
}

// Writes `v` over element `index` (flat) of the float dataset `dataset`; HDF5 recomputes the chunk's checksum.
void set_element(const std::string& path, const std::string& dataset, hsize_t index, float v) {
  edit_file(path, [&](hid_t f) {
    const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << dataset;
    const hid_t space = H5Dget_space(d);
    std::vector<hsize_t> dims(size_t(H5Sget_simple_extent_ndims(space)));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    std::vector<hsize_t> at(dims.size(), 0), one(dims.size(), 1);
    for (size_t k = dims.size(); k-- > 0; index /= dims[k]) at[k] = index % dims[k];
    H5Sselect_hyperslab(space, H5S_SELECT_SET, at.data(), nullptr, one.data(), nullptr);
    const hsize_t n = 1;
    const hid_t mem = H5Screate_simple(1, &n, nullptr);
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, &v), 0);
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(d);
  });
}

class CheckpointValidate : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    a_ = random_arenas(t_, 3);
    meta_ = make_meta(c_, 10);
    path_ = save_checkpoint(dir_.string(), meta_, t_, a_.contents(), 0, self_world());
  }
  // A fresh copy of the valid file, to damage.
  std::string copy(const std::string& name) {
    const std::string p = (dir_ / name).string();
    fs::copy_file(path_, p, fs::copy_options::overwrite_existing);
    return p;
  }
  // Every way of reading the metadata fails alike: meta only, a full load, the verification behind --resume.
  void expect_meta_error(const std::string& p, const std::vector<std::string>& in_what) {
    std::vector<std::string> with_file = in_what;
    with_file.push_back(p);
    expect_error([&] { (void)read_checkpoint_meta(p); }, with_file);
    Arenas b(t_);
    CheckpointMeta got;
    expect_error([&] { load_checkpoint(p, t_, b.sets(), got); }, with_file);
    expect_error([&] { verify_checkpoint(p); }, with_file);
  }

  const ModelConfig c_ = small_config();
  const ParamTable t_{c_};
  Arenas a_{t_};
  CheckpointMeta meta_;
  std::string path_;
};

TEST_F(CheckpointValidate, ValidFilePassesEveryCheck) {
  verify_checkpoint(path_);
  Arenas b(t_);
  CheckpointMeta got;
  load_checkpoint(path_, t_, b.sets(), got);
  EXPECT_EQ(b.params, a_.params);
  RunConfig rc;
  rc.model = c_;
  rc.training.steps = 100;
  check_resumable(path_, got, rc);
}

TEST_F(CheckpointValidate, RootCountersOutOfRange) {
  std::string p = copy("neg_step.h5");
  set_i64(p, "/", "step", -3);
  expect_meta_error(p, {"attribute /step is -3", "expected 0..2147483647"});
  p = copy("huge_step.h5");
  set_i64(p, "/", "step", int64_t(1) << 40);
  expect_meta_error(p, {"attribute /step is 1099511627776"});
  p = copy("neg_tokens.h5");
  set_i64(p, "/", "tokens_seen", -1);
  expect_meta_error(p, {"attribute /tokens_seen is -1", ">= 0"});
  p = copy("neg_opt_step.h5");
  set_i64(p, "/optimizer", "step", -7);
  expect_meta_error(p, {"attribute /optimizer:step is -7"});
}

TEST_F(CheckpointValidate, WorldSizeAgainstRankGroups) {
  std::string p = copy("ws0.h5");
  set_i64(p, "/", "world_size", 0);
  expect_meta_error(p, {"attribute /world_size is 0", "expected 1..1"});
  p = copy("ws5.h5");
  set_i64(p, "/", "world_size", 5);
  expect_meta_error(p, {"attribute /world_size is 5", "/ranks holds 1"});
}

TEST_F(CheckpointValidate, OptimizerHyperParameters) {
  std::string p = copy("eps_nan.h5");
  set_f32(p, "/optimizer", "eps", std::numeric_limits<float>::quiet_NaN());
  expect_meta_error(p, {"attribute /optimizer:eps is", "nan", "finite and > 0"});
  p = copy("eps_zero.h5");
  set_f32(p, "/optimizer", "eps", 0.0f);
  expect_meta_error(p, {"attribute /optimizer:eps is 0"});
  p = copy("beta.h5");
  set_f32(p, "/optimizer", "beta1", 1.5f);
  expect_meta_error(p, {"attribute /optimizer:beta1 is 1.5"});
  p = copy("beta2.h5");
  set_f32(p, "/optimizer", "beta2", 1.0f);
  expect_meta_error(p, {"attribute /optimizer:beta2 is 1"});
  p = copy("lr.h5");
  set_f32(p, "/optimizer", "lr", std::numeric_limits<float>::infinity());
  expect_meta_error(p, {"attribute /optimizer:lr is inf", "finite"});
  p = copy("wd.h5");
  set_f32(p, "/optimizer", "weight_decay", -0.5f);
  expect_meta_error(p, {"attribute /optimizer:weight_decay is -0.5"});
}

TEST_F(CheckpointValidate, ModeAndRoles) {
  std::string p = copy("mode.h5");
  set_str(p, "/", "mode", "banana");
  expect_meta_error(p, {"attribute /mode is \"banana\"", "\"sync\" or \"async\""});
  p = copy("role_in_sync.h5");
  set_str(p, "/ranks/0", "role", "worker");
  expect_meta_error(p, {"attribute /ranks/0:role is \"worker\"", "no role"});
  p = copy("async_without_roles.h5");
  set_str(p, "/", "mode", "async");
  expect_meta_error(p, {"attribute /ranks/0:role is \"\""});
}

TEST_F(CheckpointValidate, AsyncRankState) {
  AsyncState st = random_async_state(t_, 40, 7);
  Arenas src = random_arenas(t_, 8);
  const std::string async_dir = (dir_ / "async").string();
  const std::string good =
      save_checkpoint(async_dir, make_async_meta(c_, 3), t_, async_contents(src, st), 0, self_world());
  (void)read_checkpoint_meta(good);
  auto damaged = [&](const char* name) {
    const std::string p = (dir_ / name).string();
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    return p;
  };
  std::string p = damaged("role.h5");
  set_str(p, "/ranks/0", "role", "banana");
  expect_error([&] { (void)read_checkpoint_meta(p); }, {p, "attribute /ranks/0:role is \"banana\""});
  // The center keeps no AdamW state and sends nothing: a center with a message count is damage.
  p = damaged("center_seq.h5");
  set_str(p, "/ranks/0", "role", "center");
  expect_error([&] { (void)read_checkpoint_meta(p); }, {p, "attribute /ranks/0:optimizer_step is 13"});
  set_i64(p, "/ranks/0", "optimizer_step", 0);
  expect_error([&] { (void)read_checkpoint_meta(p); }, {p, "attribute /ranks/0:seq is 1099511627779"});
  p = damaged("worker_step.h5");
  set_i64(p, "/ranks/0", "optimizer_step", -2);
  expect_error([&] { (void)read_checkpoint_meta(p); }, {p, "attribute /ranks/0:optimizer_step is -2"});
  // A NaN in a worker's own array is named when that worker resumes.
  p = damaged("residual_nan.h5");
  set_element(p, "/ranks/0/residual", 17, std::numeric_limits<float>::quiet_NaN());
  RankArraysDst dst(40, 0.0f);
  expect_error([&] { (void)load_rank_arrays(p, 0, dst.dst()); }, {p, "/ranks/0/residual", "1 non-finite"});
}

TEST_F(CheckpointValidate, ModelSizes) {
  std::string p = copy("n_embd.h5");
  set_i64(p, "/", "n_embd", 33);
  expect_meta_error(p, {"attribute /n_embd is 33", "multiple of n_head = 2"});
  p = copy("n_head.h5");
  set_i64(p, "/", "n_head", 0);
  expect_meta_error(p, {"attribute /n_head is 0", ">= 1"});
  p = copy("n_embd_wte.h5");
  set_i64(p, "/", "n_embd", 64);
  expect_meta_error(p, {"attribute /n_embd is 64", "/model/transformer/wte/weight [64, 32]"});
  p = copy("vocab.h5");
  set_i64(p, "/", "vocab_size", 1 << 30);
  expect_meta_error(p, {"attribute /vocab_size is 1073741824", "expected 64"});
  p = copy("n_layer.h5");
  set_i64(p, "/", "n_layer", 1000000);
  expect_meta_error(p, {"attribute /n_layer is 1000000", "expected 2, the blocks under /model/transformer/h"});
}

TEST_F(CheckpointValidate, NonFiniteTensorsAreNamed) {
  const std::string weight = "/model/transformer/h/1/mlp/c_fc/weight";
  std::string p = copy("nan_weight.h5");
  set_element(p, weight, 5, std::numeric_limits<float>::quiet_NaN());
  set_element(p, weight, 77, -std::numeric_limits<float>::infinity());
  Arenas b(t_);
  CheckpointMeta got;
  const Error e = expect_error([&] { load_checkpoint(p, t_, b.sets(), got); },
                               {p, "dataset " + weight, "2 non-finite value(s) (NaN or inf)"});
  EXPECT_NE(e.hint().find("diverged"), std::string::npos) << e.hint();
  // Weights only (eval, generate) and the full verification (--resume) name it too; the scan (inspect) reports it
  // and goes on, every other dataset ok.
  expect_error([&] { load_checkpoint(p, t_, {{SET_MODEL, b.params.data()}}, got); }, {weight, "2 non-finite"});
  expect_error([&] { verify_checkpoint(p); }, {p, "dataset " + weight + " holds 2 non-finite"});
  size_t flagged = 0;
  for (const CheckpointDatasetReport& r : scan_checkpoint(p)) {
    EXPECT_EQ(r.ok, r.path != weight) << r.path << ": " << r.problem;
    if (!r.ok) {
      ++flagged;
      EXPECT_EQ(r.problem, "holds 2 non-finite value(s) (NaN or inf)");
    }
  }
  EXPECT_EQ(flagged, 1u);

  const std::string moment = "/optimizer/exp_avg/transformer/h/0/attn/c_attn/bias";
  p = copy("inf_exp_avg.h5");
  set_element(p, moment, 3, std::numeric_limits<float>::infinity());
  expect_error([&] { load_checkpoint(p, t_, b.sets(), got); }, {p, "dataset " + moment, "1 non-finite"});
  // Weights alone do not read the moments: eval of this file works.
  load_checkpoint(p, t_, {{SET_MODEL, b.params.data()}}, got);
  // A shard that misses the bad element loads; the one holding it fails.
  const ParamInfo& bias = *std::find_if(t_.params().begin(), t_.params().end(), [](const ParamInfo& q) {
    return q.name == "transformer.h.0.attn.c_attn.bias";
  });
  std::vector<float> m(bias.offset + 3, 0.0f), v(m.size(), 0.0f);
  load_checkpoint(p, t_, {{SET_EXP_AVG, m.data(), 0, bias.offset + 3}, {SET_EXP_AVG_SQ, v.data(), 0, bias.offset + 3}},
                  got);
  std::vector<float> m2(t_.total_numel() - bias.offset, 0.0f);
  expect_error([&] { load_checkpoint(p, t_, {{SET_EXP_AVG, m2.data(), bias.offset}}, got); }, {moment});
}

// The relations between counters that every run keeps, checked when a run resumes.
TEST_F(CheckpointValidate, ResumeCountersAgree) {
  RunConfig rc;
  rc.model = c_;
  rc.training.steps = 1000;
  auto refused = [&](const CheckpointMeta& m, const std::vector<std::string>& in_what) {
    std::vector<std::string> with_file = in_what;
    with_file.push_back(path_);
    expect_error([&] { check_resumable(path_, m, rc); }, with_file);
  };
  check_resumable(path_, meta_, rc);
  CheckpointMeta m = meta_;
  m.tokens_seen = 9;
  refused(m, {"attribute /tokens_seen is 9", ">= /step = 10"});
  m = meta_;
  m.ranks[0].data_cursor = uint64_t(m.tokens_seen) + 1;
  refused(m, {"attribute /ranks/0:data_cursor is"});
  m = meta_;
  m.world_size = 2;
  m.ranks.push_back(m.ranks[0]);
  check_resumable(path_, m, rc);
  m.ranks[1].data_cursor += 8;
  refused(m, {"attribute /ranks/1:data_cursor is", "the /ranks/0:data_cursor"});
  m = meta_;
  m.optimizer_step = 9;
  refused(m, {"attribute /optimizer:step is 9", "expected 10"});
  m = meta_;
  m.mode = TrainingMode::async;
  m.async_version = 4;
  m.optimizer_step = 4;
  check_resumable(path_, m, rc);
  m.optimizer_step = 10;
  refused(m, {"attribute /optimizer:step is 10", "expected 4, the /async_version"});
}

// Files an older ember wrote (tests/fixtures) pass the resume checks: sync at 2 ranks, async with 2 workers.
TEST_F(CheckpointValidate, OlderFilesAreResumable) {
  for (const char* name : {"checkpoint_v1_sync_np2.h5", "checkpoint_v1_async_np3.h5"}) {
    const std::string p = std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/" + name;
    const CheckpointMeta m = read_checkpoint_meta(p);
    RunConfig rc;
    rc.model = m.model;
    rc.training.steps = 1000;
    check_resumable(p, m, rc);
  }
}

}  // namespace
}  // namespace ember
