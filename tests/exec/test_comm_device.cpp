// test_comm_device: the device communicator (exec/comm/device_comm.hpp) on a stand-in for NCCL's table, one rank,
// with the emu-device backend's memory as the device memory (the host cannot read it): the bootstrap id goes from
// rank 0's unique_id to init; collectives of device buffers go to the table (blocking on the compute stream, the
// non-blocking ones with a request that wait() hands back), host buffers and point to point go through the host
// communicator; split() splits both; a table error is an exception naming the library. What NCCL itself does on a
// GPU is not tested here (no GPU in CI: docs/cuda.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/device_comm.hpp"

using namespace tp::exec;

namespace {

// What the stand-in table saw.
struct Seen {
  std::vector<std::string> calls;
  std::vector<long> waited;
  std::vector<unsigned char> id_made, id_joined;
  int nranks = 0, rank = -1, destroyed = 0;
  long next_request = 7;
  bool fail_all_reduce = false;
};
Seen seen;
int handle_storage[4];  // distinct non-null handles: the world, and splits

const Backend& dev() { return emu_device_backend(); }
size_t elem(int d) { return dtype_bytes(static_cast<Dtype>(d)); }
void dcopy(void* dst, const void* src, size_t bytes) {
  if (bytes) dev().copy(dst, src, bytes, CopyKind::device_to_device, Stream{});
}

DeviceCommOps fake_ops() {
  DeviceCommOps o;
  o.name = "FakeNCCL 0.1";
  o.id_bytes = 16;
  o.unique_id = [](void* id, char*, size_t) {
    seen.id_made.assign(16, 0);
    for (int i = 0; i < 16; ++i) seen.id_made[size_t(i)] = static_cast<unsigned char>(3 * i + 1);
    std::memcpy(id, seen.id_made.data(), 16);
    return 0;
  };
  o.init = [](void** c, const void* id, int nranks, int rank, char*, size_t) {
    const auto* b = static_cast<const unsigned char*>(id);
    seen.id_joined.assign(b, b + 16);
    seen.nranks = nranks, seen.rank = rank;
    *c = &handle_storage[0];
    return 0;
  };
  o.split = [](void* c, int color, int, void** out, char*, size_t) {
    seen.calls.push_back("split " + std::to_string(color) + (c == &handle_storage[0] ? " of world" : ""));
    *out = color < 0 ? nullptr : &handle_storage[1];
    return 0;
  };
  o.destroy = [](void*) { ++seen.destroyed; };
  o.all_reduce_sum = [](void* c, void*, long n, int, int async, long* req, char* why, size_t why_size) {
    if (seen.fail_all_reduce) {
      std::snprintf(why, why_size, "unhandled cuda error");
      return 1;
    }
    seen.calls.push_back(std::string(async ? "iall_reduce " : "all_reduce ") + std::to_string(n) +
                         (c == &handle_storage[1] ? " on split" : ""));
    *req = async ? seen.next_request++ : -1;
    return 0;  // (one rank: the sum is the buffer)
  };
  o.reduce_scatter_sum = [](void*, const void* in, void* out, long n, int d, int async, long* req, char*, size_t) {
    seen.calls.push_back(std::string(async ? "ireduce_scatter " : "reduce_scatter ") + std::to_string(n));
    dcopy(out, in, size_t(n) * elem(d));
    *req = async ? seen.next_request++ : -1;
    return 0;
  };
  o.all_gather = [](void*, const void* in, void* out, long n, int d, int async, long* req, char*, size_t) {
    seen.calls.push_back(std::string(async ? "iall_gather " : "all_gather ") + std::to_string(n));
    dcopy(out, in, size_t(n) * elem(d));
    *req = async ? seen.next_request++ : -1;
    return 0;
  };
  o.broadcast = [](void*, void*, long n, int, int, char*, size_t) {
    seen.calls.push_back("broadcast " + std::to_string(n));
    return 0;
  };
  o.reduce_sum = [](void*, const void* in, void* out, long n, int d, int, char*, size_t) {
    seen.calls.push_back("reduce " + std::to_string(n));
    dcopy(out, in, size_t(n) * elem(d));
    return 0;
  };
  o.all_to_all = [](void*, const void* in, void* out, long n, int d, char*, size_t) {
    seen.calls.push_back("all_to_all " + std::to_string(n));
    dcopy(out, in, size_t(n) * elem(d));
    return 0;
  };
  o.p2p_group = [](void*, const DeviceP2p* ops, int count, char*, size_t) {
    std::string c = "p2p_group";
    for (int i = 0; i < count; ++i)
      c += std::string(ops[i].send ? " send " : " recv ") + std::to_string(ops[i].n) + (ops[i].send ? " to " : " from ") +
           std::to_string(ops[i].peer);
    seen.calls.push_back(c);
    return 0;
  };
  o.wait = [](void*, long req, char*, size_t) {
    seen.waited.push_back(req);
    return 0;
  };
  return o;
}

// n floats of device memory holding v.
struct DevBuf {
  explicit DevBuf(std::vector<float> v) : n(v.size()), p(dev().alloc(sizeof(float) * n)) {
    dev().copy(p, v.data(), sizeof(float) * n, CopyKind::host_to_device, Stream{});
  }
  ~DevBuf() { dev().free(p); }
  std::vector<float> host() const {
    std::vector<float> v(n);
    dev().copy(v.data(), p, sizeof(float) * n, CopyKind::device_to_host, Stream{});
    return v;
  }
  size_t n;
  void* p;
};

}  // namespace

TEST(CommDevice, BootstrapsFromRankZerosIdAndRoutesDeviceBuffersToTheTable) {
  seen = Seen{};
  std::unique_ptr<Comm> host = make_local_comm();
  const DeviceCommOps ops = fake_ops();
  {
    std::unique_ptr<Comm> c = device_comm(*host, dev(), ops);
    EXPECT_EQ(seen.id_joined, seen.id_made);  // the id rank 0 made, broadcast, joined
    EXPECT_EQ(seen.nranks, 1);
    EXPECT_EQ(seen.rank, 0);
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);

    DevBuf a({1, 2, 3, 4}), b({0, 0, 0, 0});
    c->all_reduce_sum(a.p, 4, Dtype::f32);
    c->reduce_scatter_sum(a.p, b.p, 4, Dtype::f32);
    EXPECT_EQ(b.host(), (std::vector<float>{1, 2, 3, 4}));
    c->all_gather(a.p, b.p, 4, Dtype::f32);
    c->broadcast(a.p, 4, Dtype::f32, 0);
    c->reduce_sum(a.p, b.p, 4, Dtype::f32, 0);
    c->all_to_all(a.p, b.p, 4, Dtype::f32);
    EXPECT_EQ(seen.calls, (std::vector<std::string>{"all_reduce 4", "reduce_scatter 4", "all_gather 4", "broadcast 4",
                                                    "reduce 4", "all_to_all 4"}));

    // Host buffers (a loss scalar) and empty ones take the host communicator; the table sees nothing.
    seen.calls.clear();
    double loss = 2.5;
    c->all_reduce_sum(&loss, 1, Dtype::f64);
    c->all_reduce_sum(a.p, 0, Dtype::f32);
    EXPECT_EQ(loss, 2.5);
    EXPECT_TRUE(seen.calls.empty());
  }
  EXPECT_EQ(seen.destroyed, 1);
}

TEST(CommDevice, NonBlockingCollectivesHandTheirRequestToWait) {
  seen = Seen{};
  std::unique_ptr<Comm> host = make_local_comm();
  const DeviceCommOps ops = fake_ops();
  std::unique_ptr<Comm> c = device_comm(*host, dev(), ops);
  DevBuf a({1, 2}), b({0, 0});
  const CommRequest r1 = c->iall_reduce_sum(a.p, 2, Dtype::f32);
  const CommRequest r2 = c->ireduce_scatter_sum(a.p, b.p, 2, Dtype::f32);
  const CommRequest r3 = c->iall_gather(a.p, b.p, 2, Dtype::f32);  // (one rank: out is in)
  EXPECT_EQ(r1.id, 7);
  EXPECT_EQ(r2.id, 8);
  EXPECT_EQ(r3.id, 9);
  c->wait(r2);
  c->wait(r1);
  c->wait(r3);
  EXPECT_EQ(seen.waited, (std::vector<long>{8, 7, 9}));
  double x = 1;
  const CommRequest h = c->iall_reduce_sum(&x, 1, Dtype::f64);  // a host buffer: done when started
  EXPECT_LT(h.id, 0);
  c->wait(h);
  EXPECT_EQ(seen.waited.size(), 3u);
  EXPECT_EQ(seen.calls, (std::vector<std::string>{"iall_reduce 2", "ireduce_scatter 2", "iall_gather 2"}));
  // Whether they progress beside compute is the table's word (NCCL's: yes; the emu-device stand-in runs them at
  // their wait: no, so calibrate measures no slowdown through it).
  EXPECT_FALSE(c->progresses_async());
  DeviceCommOps async_ops = fake_ops();
  async_ops.progresses_async = 1;
  EXPECT_TRUE(device_comm(*host, dev(), async_ops)->progresses_async());
  EXPECT_EQ(emu_nccl_ops().progresses_async, 0);
}

TEST(CommDevice, SplitSplitsBothAndErrorsNameTheLibrary) {
  seen = Seen{};
  std::unique_ptr<Comm> host = make_local_comm();
  const DeviceCommOps ops = fake_ops();
  std::unique_ptr<Comm> c = device_comm(*host, dev(), ops);
  std::unique_ptr<Comm> s = c->split(3, 0);
  ASSERT_NE(s, nullptr);
  DevBuf a({5});
  s->all_reduce_sum(a.p, 1, Dtype::f32);
  EXPECT_EQ(s->size(), 1);
  EXPECT_EQ(c->split(-1, 0), nullptr);
  EXPECT_EQ(seen.calls, (std::vector<std::string>{"split 3 of world", "all_reduce 1 on split", "split -1 of world"}));
  s.reset();
  EXPECT_EQ(seen.destroyed, 1);  // the split's handle

  seen.fail_all_reduce = true;
  try {
    c->all_reduce_sum(a.p, 1, Dtype::f32);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "FakeNCCL 0.1: unhandled cuda error");
  }
}

namespace {
// A host communicator of two ranks whose all-gather makes rank 1 a copy of rank 0 (two ranks of one host on one
// GPU); broadcasts keep the buffer (rank 0's). Only what device_comm's bootstrap calls.
struct TwinHost final : Comm {
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::unique_ptr<Comm> split(int, int) override { return nullptr; }
  void all_reduce_sum(void*, long, Dtype) override {}
  void reduce_scatter_sum(const void*, void*, long, Dtype) override {}
  void all_gather(const void* in, void* out, long n, Dtype d) override {
    const size_t b = size_t(n) * dtype_bytes(d);
    std::memcpy(out, in, b);
    std::memcpy(static_cast<char*>(out) + b, in, b);
  }
  void broadcast(void*, long, Dtype, int) override {}
  void reduce_sum(const void*, void*, long, Dtype, int) override {}
  void all_to_all(const void*, void*, long, Dtype) override {}
  void send(const void*, long, Dtype, int, int) override {}
  void recv(void*, long, Dtype, int, int) override {}
  void isend(const void*, long, Dtype, int, int) override {}
  void wait_sends() override {}
  int reap_sends() override { return 0; }
  void barrier() override {}
  [[noreturn]] void abort(int, const std::string& m) override { throw std::runtime_error(m); }
};
}  // namespace

namespace {
// A two-rank host communicator that records its point-to-point calls; reap_sends reports `done` sends (then 0).
struct PeerHost final : Comm {
  std::vector<std::string> calls;
  int done = 0;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::unique_ptr<Comm> split(int, int) override { return nullptr; }
  void all_reduce_sum(void*, long, Dtype) override {}
  void reduce_scatter_sum(const void*, void*, long, Dtype) override {}
  void all_gather(const void*, void*, long, Dtype) override {}
  void broadcast(void*, long, Dtype, int) override {}
  void reduce_sum(const void*, void*, long, Dtype, int) override {}
  void all_to_all(const void*, void*, long, Dtype) override {}
  void send(const void*, long, Dtype, int, int) override {}
  void recv(void*, long n, Dtype, int src, int tag) override {
    calls.push_back("recv " + std::to_string(n) + " from " + std::to_string(src) + " tag " + std::to_string(tag));
  }
  void isend(const void*, long n, Dtype, int dst, int tag) override {
    calls.push_back("isend " + std::to_string(n) + " to " + std::to_string(dst) + " tag " + std::to_string(tag));
  }
  void wait_sends() override {}
  int reap_sends() override { return std::exchange(done, 0); }
  void barrier() override {}
  [[noreturn]] void abort(int, const std::string& m) override { throw std::runtime_error(m); }
};
}  // namespace

// The pipeline's exchanges: all-device groups go to the table as one group, whose sends are done at once (stream
// order); a group with a host buffer goes the host way (staged), whose sends are done when the host says; reap_sends
// counts them in call order.
TEST(CommDevice, ExchangesOfDeviceBuffersAreOneGroupAndReapInOrder) {
  seen = Seen{};
  PeerHost host;
  const DeviceCommOps ops = fake_ops();
  std::unique_ptr<Comm> c = device_comm(host, dev(), ops);
  DevBuf a({1, 2, 3}), b({0, 0, 0});
  c->exchange({{true, a.p, 3, Dtype::f32, 1, 5}, {false, b.p, 3, Dtype::f32, 1, 6}});
  EXPECT_EQ(seen.calls, (std::vector<std::string>{"p2p_group send 3 to 1 recv 3 from 1"}));
  EXPECT_TRUE(host.calls.empty());
  EXPECT_EQ(c->reap_sends(), 1);

  float h[3] = {4, 5, 6};  // a host send beside a device receive: the host communicator's exchange, staged
  c->exchange({{true, h, 3, Dtype::f32, 1, 7}, {false, b.p, 3, Dtype::f32, 1, 8}});
  EXPECT_EQ(host.calls, (std::vector<std::string>{"isend 3 to 1 tag 7", "recv 3 from 1 tag 8"}));
  EXPECT_EQ(seen.calls.size(), 1u);
  c->exchange({{true, a.p, 3, Dtype::f32, 1, 9}});  // a device send behind the host one
  EXPECT_EQ(c->reap_sends(), 0);  // (the host send is pending, and the device one is counted after it)
  host.done = 1;
  EXPECT_EQ(c->reap_sends(), 2);
  EXPECT_EQ(c->reap_sends(), 0);
}

// Two ranks on one GPU: refused on every rank before any joins (NCCL before 2.30 says "Duplicate GPU detected"
// only after the others hang in init), unless the library shares GPUs (NCCL_MULTI_RANK_GPU_ENABLE=1 on 2.30+).
TEST(CommDevice, RanksSharingAGpuAreRefusedUnlessTheLibraryAllowsIt) {
  seen = Seen{};
  TwinHost host;
  DeviceCommOps ops = fake_ops();
  ops.local_device = [] { return 3; };
  try {
    device_comm(host, dev(), ops);
    FAIL() << "no refusal";
  } catch (const DeviceCommRefused& e) {
    EXPECT_NE(std::string(e.what()).find("--comm nccl: ranks 0 and 1 share GPU 3 of one host; FakeNCCL 0.1 refuses"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(seen.nranks, 0);  // nobody joined
  ops.shares_gpus = 1;
  std::unique_ptr<Comm> c = device_comm(host, dev(), ops);
  EXPECT_EQ(seen.nranks, 2);
}
