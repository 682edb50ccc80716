// Tests of exec/checkpoint: bit-identical round trips, rejection of truncated / corrupted / foreign files with
// messages naming the file, latest_complete ignoring incomplete steps and leftover .tmp files, and atomic
// replacement of an existing checkpoint.
#include <gtest/gtest.h>

#include "temp_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "exec/io/checkpoint.hpp"
#include "models/json_check.hpp"

namespace fs = std::filesystem;
using namespace tp::exec;

namespace {

struct TempDir : tp::testutil::TempDir {
  TempDir() : tp::testutil::TempDir("tp_ckpt") {}
};

struct Sample {
  std::vector<double> w = {1.0, -0.0, 3.141592653589793, std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::quiet_NaN(), -1e300};
  std::vector<float> m = {0.5f, -2.25f, 1e-30f};
  std::vector<int32_t> ids = {-7, 0, 2147483647};
  std::vector<uint8_t> flags = {1, 0, 255, 3, 4};  // odd size: the next tensor is padded
  std::vector<float> empty;
  std::vector<TensorView> views() const {
    return {{"w", Dtype::f64, w.data(), static_cast<long>(w.size())},
            {"m", Dtype::f32, m.data(), static_cast<long>(m.size())},
            {"flags", Dtype::u8, flags.data(), static_cast<long>(flags.size())},
            {"ids", Dtype::i32, ids.data(), static_cast<long>(ids.size())},
            {"empty", Dtype::f32, empty.data(), 0}};
  }
};

CheckpointHeader header(long step, int rank = 0, int world = 1) {
  CheckpointHeader h;
  h.step = step;
  h.seed = 0xfedcba9876543210ULL;
  h.rank = rank;
  h.world_size = world;
  h.description = R"({"model": "tiny", "plan": {"dp": 2}} "quoted" \ ünïcode)";
  return h;
}

void expect_rejected(const std::string& path, const std::string& what) {
  try {
    read_checkpoint(path);
    ADD_FAILURE() << path << " was accepted";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  std::string why;
  EXPECT_FALSE(checkpoint_valid(path, nullptr, &why));
  EXPECT_NE(why.find(what), std::string::npos) << why;
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitIdentical) {
  TempDir d;
  Sample s;
  const auto views = s.views();
  const std::string p = d.file("a.ckpt");
  write_checkpoint(p, header(12, 1, 4), views);
  const Checkpoint c = read_checkpoint(p);
  EXPECT_EQ(c.header.step, 12);
  EXPECT_EQ(c.header.seed, 0xfedcba9876543210ULL);
  EXPECT_EQ(c.header.rank, 1);
  EXPECT_EQ(c.header.world_size, 4);
  EXPECT_EQ(c.header.description, header(12).description);
  ASSERT_EQ(c.tensors.size(), 5u);
  for (const auto& t : c.tensors) EXPECT_EQ(t.offset % 8, 0u) << t.name;
  std::vector<double> w(s.w.size());
  c.copy_to("w", w.data(), static_cast<long>(w.size()), Dtype::f64);
  EXPECT_EQ(std::memcmp(w.data(), s.w.data(), w.size() * 8), 0);  // NaN and -0.0 included
  std::vector<float> m(3);
  c.copy_to("m", m.data(), 3, Dtype::f32);
  EXPECT_EQ(m, s.m);
  std::vector<int32_t> ids(3);
  c.copy_to("ids", ids.data(), 3, Dtype::i32);
  EXPECT_EQ(ids, s.ids);
  std::vector<uint8_t> flags(5);
  c.copy_to("flags", flags.data(), 5, Dtype::u8);
  EXPECT_EQ(flags, s.flags);
  c.copy_to("empty", nullptr, 0, Dtype::f32);
  EXPECT_EQ(c.find("nope"), nullptr);
  EXPECT_THROW(c.copy_to("nope", m.data(), 3, Dtype::f32), std::runtime_error);
  EXPECT_THROW(c.copy_to("m", m.data(), 2, Dtype::f32), std::runtime_error);
  EXPECT_THROW(c.copy_to("m", w.data(), 3, Dtype::f64), std::runtime_error);
  // Writing the same content again gives the same bytes.
  write_checkpoint(d.file("b.ckpt"), header(12, 1, 4), views);
  EXPECT_EQ(slurp(p), slurp(d.file("b.ckpt")));
  CheckpointHeader h;
  EXPECT_TRUE(checkpoint_valid(p, &h));
  EXPECT_EQ(h.step, 12);
}

TEST(Checkpoint, BadTensorListsRejected) {
  TempDir d;
  float x = 1;
  std::vector<TensorView> dup = {{"a", Dtype::f32, &x, 1}, {"a", Dtype::f32, &x, 1}};
  EXPECT_THROW(write_checkpoint(d.file("x.ckpt"), header(0), dup), std::invalid_argument);
  std::vector<TensorView> unnamed = {{"", Dtype::f32, &x, 1}};
  EXPECT_THROW(write_checkpoint(d.file("x.ckpt"), header(0), unnamed), std::invalid_argument);
  std::vector<TensorView> null = {{"a", Dtype::f32, nullptr, 3}};
  EXPECT_THROW(write_checkpoint(d.file("x.ckpt"), header(0), null), std::invalid_argument);
  EXPECT_FALSE(fs::exists(d.file("x.ckpt")));
}

TEST(Checkpoint, TruncatedOrCorruptedRejected) {
  TempDir d;
  Sample s;
  const std::string p = d.file("good.ckpt");
  write_checkpoint(p, header(3), s.views());
  const std::vector<char> good = slurp(p);

  auto variant = [&](const std::string& name, std::vector<char> bytes) {
    const std::string q = d.file(name);
    spit(q, bytes);
    return q;
  };
  expect_rejected(d.file("missing.ckpt"), "cannot open");
  expect_rejected(variant("tiny.ckpt", {good.begin(), good.begin() + 10}), "truncated checkpoint");
  expect_rejected(variant("cut.ckpt", {good.begin(), good.end() - 1}), "truncated checkpoint: expected");
  expect_rejected(variant("cut_header.ckpt", {good.begin(), good.begin() + 40}), "truncated or corrupt");
  auto longer = good;
  longer.push_back('x');
  expect_rejected(variant("long.ckpt", longer), "trailing bytes");
  auto magic = good;
  magic[0] = 'X';
  expect_rejected(variant("magic.ckpt", magic), "bad magic");
  auto payload = good;
  payload[payload.size() - 3] ^= 0x01;  // one bit of tensor data
  expect_rejected(variant("payload.ckpt", payload), "payload checksum mismatch");
  auto head = good;
  head[20] ^= 0x20;  // inside the JSON header
  expect_rejected(variant("header.ckpt", head), "header checksum mismatch");
  auto hlen = good;
  hlen[8] = static_cast<char>(0xff);
  hlen[13] = 0x7f;  // absurd header length
  expect_rejected(variant("hlen.ckpt", hlen), "truncated or corrupt checkpoint: header length");
  // The original is still fine.
  EXPECT_NO_THROW(read_checkpoint(p));
}

TEST(Checkpoint, PathsAndLatestComplete) {
  TempDir d;
  const std::string dir = d.path.string();
  EXPECT_EQ(checkpoint_path(dir, 120, 3), (d.path / "step_00000120" / "rank_00003.ckpt").string());
  EXPECT_EQ(latest_complete(dir, 2), std::nullopt);
  EXPECT_EQ(latest_complete(d.file("does_not_exist"), 2), std::nullopt);
  Sample s;
  for (long step : {10, 20})
    for (int r = 0; r < 2; ++r) write_checkpoint(checkpoint_path(dir, step, r), header(step, r, 2), s.views());
  EXPECT_EQ(latest_complete(dir, 2), 20);
  // Step 30: rank 0 finished, rank 1 was killed mid-write (only its .tmp exists).
  write_checkpoint(checkpoint_path(dir, 30, 0), header(30, 0, 2), s.views());
  write_checkpoint(checkpoint_path(dir, 30, 1) + ".tmp", header(30, 1, 2), s.views());  // a complete-looking .tmp
  EXPECT_TRUE(fs::exists(checkpoint_path(dir, 30, 1) + ".tmp"));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir, 30, 1)));
  EXPECT_EQ(latest_complete(dir, 2), 20);
  // Step 40: both present but rank 1's file is corrupt.
  for (int r = 0; r < 2; ++r) write_checkpoint(checkpoint_path(dir, 40, r), header(40, r, 2), s.views());
  fs::resize_file(checkpoint_path(dir, 40, 1), fs::file_size(checkpoint_path(dir, 40, 1)) - 4);
  EXPECT_EQ(latest_complete(dir, 2), 20);
  // Step 50: valid files whose headers disagree with their names (wrong world size / rank) do not count.
  for (int r = 0; r < 2; ++r) write_checkpoint(checkpoint_path(dir, 50, r), header(50, r, 4), s.views());
  write_checkpoint(checkpoint_path(dir, 60, 0), header(60, 0, 2), s.views());
  write_checkpoint(checkpoint_path(dir, 60, 1), header(60, 0, 2), s.views());
  EXPECT_EQ(latest_complete(dir, 2), 20);
  // Stray entries are ignored.
  fs::create_directories(d.path / "step_abc");
  std::ofstream(d.path / "notes.txt") << "x";
  EXPECT_EQ(latest_complete(dir, 2), 20);
  // Once rank 1 of step 30 completes, 30 is the newest complete step; a one-rank world sees its own newest.
  write_checkpoint(checkpoint_path(dir, 30, 1), header(30, 1, 2), s.views());
  EXPECT_EQ(latest_complete(dir, 2), 30);
  EXPECT_EQ(latest_complete(dir, 1), std::nullopt);  // every file here was written for world size 2 or 4
}

TEST(Checkpoint, AtomicReplace) {
  TempDir d;
  const std::string p = d.file("c.ckpt");
  std::vector<double> v1(1000, 1.0), v2(1000, 2.0);
  std::vector<TensorView> t1 = {{"v", Dtype::f64, v1.data(), 1000}}, t2 = {{"v", Dtype::f64, v2.data(), 1000}};
  write_checkpoint(p, header(1), t1);
  // A stale .tmp from a killed writer neither blocks nor leaks into the next write (fresh temporaries are
  // unique names; a stale one is never opened, so it stays as it was).
  spit(p + ".tmp", {'j', 'u', 'n', 'k'});
  write_checkpoint(p, header(2), t2);
  EXPECT_EQ(fs::file_size(p + ".tmp"), 4u);
  fs::remove(p + ".tmp");
  const Checkpoint c = read_checkpoint(p);
  EXPECT_EQ(c.header.step, 2);
  std::vector<double> got(1000);
  c.copy_to("v", got.data(), 1000, Dtype::f64);
  EXPECT_EQ(got, v2);
  // A reader holding the old file keeps seeing the old, complete content (rename, never in-place writes).
  std::ifstream old(p, std::ios::binary);
  write_checkpoint(p, header(3), t1);
  std::vector<char> held((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>());
  spit(d.file("held.ckpt"), held);
  EXPECT_EQ(read_checkpoint(d.file("held.ckpt")).header.step, 2);
  EXPECT_EQ(read_checkpoint(p).header.step, 3);
  // A failed write (unwritable destination) leaves the old file intact and no .tmp behind.
  EXPECT_THROW(write_checkpoint((d.path / "c.ckpt" / "sub.ckpt").string(), header(4), t2), std::runtime_error);
  EXPECT_EQ(read_checkpoint(p).header.step, 3);
}

// --keep-checkpoints counts complete, verified checkpoints only (issue 44, item 6): with steps 2, 4 and 6 on disk
// and step 4 corrupt, keeping 3 after step 8 keeps 8, 6 and 2 (three good ones); before, step 2 was removed and
// the corrupt step 4 kept.
TEST(Checkpoint, PruneCountsOnlyCompleteCheckpoints) {
  TempDir d;
  const std::string dir = d.path.string();
  Sample s;
  for (long step : {2, 4, 6, 8}) write_checkpoint(checkpoint_path(dir, step, 0), header(step, 0, 1), s.views());
  fs::resize_file(checkpoint_path(dir, 4, 0), fs::file_size(checkpoint_path(dir, 4, 0)) - 4);  // step 4 corrupt
  prune_checkpoints(dir, 3, 8);
  for (long step : {2, 6, 8}) EXPECT_TRUE(fs::exists(checkpoint_step_dir(dir, step))) << step;
  // A newer complete one: now 10, 8, 6 are the three; the corrupt 4 and the complete 2 are older: removed.
  write_checkpoint(checkpoint_path(dir, 10, 0), header(10, 0, 1), s.views());
  prune_checkpoints(dir, 3, 10);
  for (long step : {6, 8, 10}) EXPECT_TRUE(fs::exists(checkpoint_step_dir(dir, step))) << step;
  for (long step : {2, 4}) EXPECT_FALSE(fs::exists(checkpoint_step_dir(dir, step))) << step;
}

// Resuming with another rank count: the checkpoints are complete, for another job size, and the skip says so
// (issue 44, item 10: it called them "incomplete or corrupt").
TEST(Checkpoint, LatestCompleteNamesAnotherJobSize) {
  TempDir d;
  const std::string dir = d.path.string();
  Sample s;
  for (int r = 0; r < 2; ++r) write_checkpoint(checkpoint_path(dir, 4, r), header(4, r, 2), s.views());
  std::vector<std::string> skipped;
  int other = 0;
  EXPECT_EQ(latest_complete(dir, 1, &skipped, &other), std::nullopt);
  EXPECT_EQ(other, 2);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("complete, but written by a job of 2 ranks; this job has 1"), std::string::npos) << skipped[0];
  EXPECT_EQ(latest_complete(dir, 2), 4);
}

// --checkpoint-dir is checked before step 1 (issue 44, item 5): a file, a FIFO, a path that cannot be created,
// a step folder that is not a folder and a rank file that is a FIFO are refused with the path and what it is.
TEST(Checkpoint, CheckpointDirCheckedBeforeTraining) {
  TempDir d;
  auto refused = [](const std::string& dir, const std::string& what) {
    try {
      check_checkpoint_dir(dir, 2);
      ADD_FAILURE() << dir << " accepted";
    } catch (const tp::InputError& e) {
      EXPECT_NE(e.messages.at(0).find(what), std::string::npos) << e.messages.at(0);
      EXPECT_NE(e.messages.at(0).find("--checkpoint-dir"), std::string::npos) << e.messages.at(0);
    }
  };
  std::ofstream(d.file("afile")) << "x";
  refused(d.file("afile"), "expected a directory");
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  refused(d.file("fifo"), "FIFO");
  refused("/proc/trainplan-ckpt", "cannot");
  refused(d.file("afile") + "/sub", "cannot");
  const std::string ok = d.file("ck");
  EXPECT_NO_THROW(check_checkpoint_dir(ok, 2));  // created
  EXPECT_TRUE(fs::is_directory(ok));
  ASSERT_EQ(::mkfifo(checkpoint_step_dir(ok, 6).c_str(), 0600), 0);
  refused(ok, "step_00000006 is a FIFO");
  fs::remove(checkpoint_step_dir(ok, 6));
  fs::create_directories(checkpoint_step_dir(ok, 6));
  ASSERT_EQ(::mkfifo(checkpoint_path(ok, 6, 1).c_str(), 0600), 0);
  refused(ok, "rank_00001.ckpt is a FIFO");
  EXPECT_NO_THROW(check_checkpoint_dir(ok, 1));  // rank 1's file is not this one-rank job's
  for (const auto& e : fs::directory_iterator(ok))  // the probes are gone
    EXPECT_EQ(e.path().filename().string().rfind(".trainplan-probe", 0), std::string::npos) << e.path();
}
