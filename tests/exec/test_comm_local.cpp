// Tests of the one-rank communicator (exec/comm/comm_local.cpp): every collective is a copy with size() == 1, sums
// reject u8, point-to-point to self throws, split gives another one-rank communicator, and world() without
// mpirun is one rank (this test binary is never launched by mpirun).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "exec/comm/comm.hpp"

using namespace tp::exec;

TEST(CommLocal, DtypeBytes) {
  EXPECT_EQ(dtype_bytes(Dtype::f32), 4u);
  EXPECT_EQ(dtype_bytes(Dtype::f64), 8u);
  EXPECT_EQ(dtype_bytes(Dtype::i32), 4u);
  EXPECT_EQ(dtype_bytes(Dtype::u8), 1u);
}

TEST(CommLocal, CollectivesAreCopies) {
  auto c = make_local_comm();
  ASSERT_EQ(c->rank(), 0);
  ASSERT_EQ(c->size(), 1);
  std::vector<double> a = {1.5, -2.0, 3.25};
  c->all_reduce_sum(a.data(), 3, Dtype::f64);
  EXPECT_EQ(a, (std::vector<double>{1.5, -2.0, 3.25}));

  std::vector<float> in = {1, 2, 3}, out(3, 0);
  c->reduce_scatter_sum(in.data(), out.data(), 3, Dtype::f32);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.f);
  c->all_gather(in.data(), out.data(), 3, Dtype::f32);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.f);
  c->all_to_all(in.data(), out.data(), 3, Dtype::f32);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.f);
  c->reduce_sum(in.data(), out.data(), 3, Dtype::f32, 0);
  EXPECT_EQ(out, in);
  c->reduce_sum(in.data(), nullptr, 3, Dtype::f32, 0);  // null out is allowed

  std::vector<int32_t> ints = {7, -8};
  c->all_reduce_sum(ints.data(), 2, Dtype::i32);
  EXPECT_EQ(ints, (std::vector<int32_t>{7, -8}));
  std::vector<uint8_t> bytes = {1, 2, 255};
  c->broadcast(bytes.data(), 3, Dtype::u8, 0);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 255}));
  c->all_reduce_sum(a.data(), 0, Dtype::f64);  // empty is fine
  c->barrier();
}

TEST(CommLocal, InPlaceCopiesAreFine) {
  auto c = make_local_comm();
  std::vector<double> v = {1, 2};
  c->all_gather(v.data(), v.data(), 2, Dtype::f64);
  c->all_to_all(v.data(), v.data(), 2, Dtype::f64);
  EXPECT_EQ(v, (std::vector<double>{1, 2}));
}

TEST(CommLocal, Errors) {
  auto c = make_local_comm();
  std::vector<uint8_t> b(4);
  EXPECT_THROW(c->all_reduce_sum(b.data(), 4, Dtype::u8), std::invalid_argument);
  EXPECT_THROW(c->reduce_scatter_sum(b.data(), b.data(), 4, Dtype::u8), std::invalid_argument);
  EXPECT_THROW(c->reduce_sum(b.data(), b.data(), 4, Dtype::u8, 0), std::invalid_argument);
  EXPECT_THROW(c->broadcast(b.data(), 4, Dtype::u8, 1), std::invalid_argument);
  EXPECT_THROW(c->all_gather(b.data(), b.data(), -1, Dtype::u8), std::invalid_argument);
  EXPECT_THROW(c->send(b.data(), 4, Dtype::u8, 0, 0), std::logic_error);
  EXPECT_THROW(c->recv(b.data(), 4, Dtype::u8, 0, 0), std::logic_error);
}

TEST(CommLocal, Split) {
  auto c = make_local_comm();
  auto s = c->split(3, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->size(), 1);
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(c->split(-1, 0), nullptr);
}

TEST(CommLocal, WorldWithoutMpirunIsOneRank) {
  EXPECT_EQ(world().size(), 1);
  EXPECT_EQ(world().rank(), 0);
  EXPECT_EQ(&world(), &world());
}

TEST(CommLocalDeathTest, AbortExitsWithCodeAndMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto c = make_local_comm();
  EXPECT_EXIT(c->abort(3, "boom"), ::testing::ExitedWithCode(3), "error: rank 0: boom");
}
