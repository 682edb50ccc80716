// test_emu_device: the emu-device backend (exec/backends/emu/backend_emu_device.cpp) and host staging of
// communication (exec/comm/comm_staged.cpp):
// - its tensor memory is not host-accessible: a host read or write of an allocation dies naming the address,
//   as does a copy whose host side is device memory; ops and copies reach it (results equal the emu backend's);
// - is_device_ptr tells device allocations from pinned host memory, which host code and ops both use;
// - the staged communicator moves device buffers through pinned host memory: every collective gives the
//   local communicator's result, while the same call on the unstaged communicator dies (its memcpy touches
//   device memory) — the staging copy is what makes it work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/runtime/offload/chunk_store.hpp"
#include "exec/comm/comm.hpp"
#include "exec/backends/ops.hpp"
#include "exec/emu_device_util.hpp"

using namespace tp::exec;
namespace ops = tp::ops;

using testdev::dev;
using testdev::down;
using testdev::up;

TEST(EmuDevice, MemoryIsNotHostAccessible) {
  EXPECT_STREQ(dev().name, "emu-device");
  EXPECT_FALSE(dev().host_accessible);
  std::string why;
  EXPECT_EQ(find_backend("emu-device", why), &dev());
  float* d = up({1, 2, 3, 4});
  EXPECT_TRUE(on_device(dev(), d));
  EXPECT_TRUE(on_device(dev(), d + 3));
  void* pinned = dev().alloc_pinned(64);
  EXPECT_FALSE(on_device(dev(), pinned));
  EXPECT_FALSE(on_device(emu_backend(), d));  // a host-accessible backend never stages
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH({ volatile float x = d[1]; (void)x; }, "host code touched device memory");
  EXPECT_DEATH({ d[2] = 7.f; }, "host code touched device memory");
  std::vector<float> h(4);
  EXPECT_DEATH(std::memcpy(h.data(), d, 16), "host code touched device memory");
  // A copy's host side must be host memory (a cudaMemcpy of the wrong kind fails too).
  float* e = static_cast<float*>(dev().alloc(16));
  EXPECT_DEATH(dev().copy(e, d, 16, CopyKind::host_to_device, Stream{}), "host code touched device memory");
  dev().copy(e, d, 16, CopyKind::device_to_device, Stream{});
  EXPECT_EQ(down(e, 4), (std::vector<float>{1, 2, 3, 4}));
  dev().free(e);
  dev().free(d);
  dev().free_pinned(pinned);
}

TEST(EmuDevice, OpsTranslateTensorsAndAcceptPinnedMemory) {
  BackendScope on(dev());
  float* x = up({1, -2, 3, 0.5f});
  float* y = static_cast<float*>(dev().alloc(16));
  ops::scale(y, x + 1, 2.f, 3);  // an interior pointer
  EXPECT_EQ(down(y, 3), (std::vector<float>{-4, 6, 1}));
  EXPECT_DOUBLE_EQ(ops::sum_squares(x, 4), 1 + 4 + 9 + 0.25);
  // Pinned host memory: written by the host, read by an op (mapped pinned memory on a GPU).
  auto* p = static_cast<float*>(dev().alloc_pinned(16));
  for (int i = 0; i < 4; ++i) p[i] = float(i);
  ops::add(y, x, p, 4);
  EXPECT_EQ(down(y, 4), (std::vector<float>{1, -1, 5, 3.5f}));
  // A host pointer that is not pinned memory is rejected by name, as on emu.
  std::vector<float> host(4);
  EXPECT_THROW(ops::copy(y, host.data(), 4), std::runtime_error);
  dev().free_pinned(p);
  dev().free(y);
  dev().free(x);
}

TEST(EmuDevice, StagedCommunicationMovesDeviceBuffersThroughTheHost) {
  BackendScope on(dev());
  auto local = make_local_comm();
  auto staged = staged_comm(*local, dev());
  float* in = up({1, 2, 3});
  float* out = static_cast<float*>(dev().alloc(12));
  staged->reduce_scatter_sum(in, out, 3, Dtype::f32);
  EXPECT_EQ(down(out, 3), (std::vector<float>{1, 2, 3}));
  dev().copy(out, std::vector<float>(3, 0.f).data(), 12, CopyKind::host_to_device, Stream{});
  staged->all_gather(in, out, 3, Dtype::f32);
  EXPECT_EQ(down(out, 3), (std::vector<float>{1, 2, 3}));
  dev().copy(out, std::vector<float>(3, 0.f).data(), 12, CopyKind::host_to_device, Stream{});
  staged->all_to_all(in, out, 3, Dtype::f32);
  EXPECT_EQ(down(out, 3), (std::vector<float>{1, 2, 3}));
  staged->all_reduce_sum(in, 3, Dtype::f32);
  staged->broadcast(in, 3, Dtype::f32, 0);
  EXPECT_EQ(down(in, 3), (std::vector<float>{1, 2, 3}));
  std::vector<float> host = {4, 5, 6}, hout(3);  // host buffers pass as they are
  staged->reduce_scatter_sum(host.data(), hout.data(), 3, Dtype::f32);
  EXPECT_EQ(hout, host);
  auto sub = staged->split(0, 0);  // sub-communicators stage too
  sub->reduce_scatter_sum(in, out, 3, Dtype::f32);
  EXPECT_EQ(down(out, 3), (std::vector<float>{1, 2, 3}));
  // Without the staging copy the communicator reads device memory on the host.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(local->reduce_scatter_sum(in, out, 3, Dtype::f32), "host code touched device memory");
  dev().free(out);
  dev().free(in);
}

// The chunk store on device memory (chunked offload on a GPU): the host flat buffers are pinned memory, chunks
// move by the backend's copies, the arena compacts with device-to-device copies (a host memmove of the arena
// would die here), and the gradients the "compute" adds through the tables (device ops) arrive exactly.
TEST(EmuDevice, ChunkStoreMovesAndCompactsDeviceMemory) {
  BackendScope on(dev());
  const std::vector<long long> sizes = {40, 200, 30, 30, 150, 90, 10, 250};
  const std::vector<int> parts = {0, 0, 1, 1, 2, 3, 3, 4};
  std::vector<ChunkTensor> ts;
  long long n = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ts.push_back(ChunkTensor{n, sizes[i], parts[i], (int)i});
    n += sizes[i];
  }
  auto* params = static_cast<double*>(dev().alloc_pinned(sizeof(double) * n));
  auto* grads = static_cast<double*>(dev().alloc_pinned(sizeof(double) * n));
  for (long long i = 0; i < n; ++i) params[i] = 0.5 + (double)i, grads[i] = -(double)i;
  auto* ones = static_cast<double*>(dev().alloc(sizeof(double) * 250));
  ops::fill(ones, 1.0, 250);
  std::vector<double*> ptab(sizes.size()), gtab(sizes.size());
  ChunkStore<double> s(ts, 5, 64, (250 + 200 + 64) * 8.0, 1.0, params, grads, ptab, gtab);
  const std::vector<std::vector<int>> moments = {{0}, {1}, {2}, {4}, {3}, {4}, {2, 3}, {1}, {0}};
  long long compactions = 0;
  bool on_arena = false;
  for (int st = 0; st < 4; ++st) {
    s.begin_step();
    for (int k = 0; k < (int)moments.size(); ++k) {
      s.access(k, moments[k]);
      for (size_t t = 0; t < ts.size(); ++t)
        if (std::find(moments[k].begin(), moments[k].end(), ts[t].part) != moments[k].end()) {
          ops::accumulate(gtab[t], ones, (long)ts[t].count);
          on_arena = on_arena || on_device(dev(), ptab[t]) || on_device(dev(), gtab[t]);
        }
    }
    s.host_phase_begin((int)moments.size());
    s.host_phase_end();
    compactions += s.end_step().compactions;
  }
  s.evict_all();
  EXPECT_TRUE(on_arena);        // the tables did point into device memory
  EXPECT_GT(compactions, 0);    // and the arena compacted
  std::vector<int> uses(5, 0);
  for (const auto& m : moments)
    for (int part : m) uses[part] += 4;
  for (size_t t = 0; t < ts.size(); ++t)
    for (long long i = 0; i < ts[t].count; ++i) {
      ASSERT_EQ(params[ts[t].offset + i], 0.5 + (double)(ts[t].offset + i)) << "tensor " << t;
      ASSERT_EQ(grads[ts[t].offset + i], -(double)(ts[t].offset + i) + uses[ts[t].part]) << "tensor " << t;
    }
  dev().free(ones);
  dev().free_pinned(grads);
  dev().free_pinned(params);
}
