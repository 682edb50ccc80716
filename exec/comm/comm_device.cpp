// comm_device: the device communicator (device_comm.hpp) — collectives and exchanges of device buffers through a
// DeviceCommOps table (NCCL), every other call through the host communicator, staged for the backend.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/comm/device_comm.hpp"

namespace tp::exec {
namespace {

class DeviceComm final : public Comm {
 public:
  // dc: the device communicator (destroyed with this); host: its host twin over the same ranks (owned when
  // host_owned holds it).
  DeviceComm(const DeviceCommOps& ops, void* dc, Comm* host, std::unique_ptr<Comm> host_owned, const Backend& be)
      : ops_(&ops), dc_(dc), host_(host), host_own_(std::move(host_owned)), be_(&be),
        staged_(staged_comm(*host, be)) {}
  ~DeviceComm() override {
    if (dc_) ops_->destroy(dc_);
  }
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::unique_ptr<Comm> split(int color, int key) override {
    std::unique_ptr<Comm> h = host_->split(color, key);
    void* d = nullptr;
    check(ops_->split(dc_, color, key, &d, why_, sizeof why_));
    if (!h) {
      if (d) ops_->destroy(d);
      return nullptr;
    }
    Comm* raw = h.get();
    return std::make_unique<DeviceComm>(*ops_, d, raw, std::move(h), *be_);
  }

  void all_reduce_sum(void* buf, long n, Dtype d) override {
    if (!dev(buf, n)) return staged_->all_reduce_sum(buf, n, d);
    long req = -1;
    check(ops_->all_reduce_sum(dc_, buf, n, int(d), 0, &req, why_, sizeof why_));
  }
  void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    if (!dev(in, n) || !dev(out, n)) return staged_->reduce_scatter_sum(in, out, n, d);
    long req = -1;
    check(ops_->reduce_scatter_sum(dc_, in, out, n, int(d), 0, &req, why_, sizeof why_));
  }
  CommRequest iall_reduce_sum(void* buf, long n, Dtype d) override {
    if (!dev(buf, n)) return staged_->iall_reduce_sum(buf, n, d);
    CommRequest r;
    check(ops_->all_reduce_sum(dc_, buf, n, int(d), 1, &r.id, why_, sizeof why_));
    return r;
  }
  CommRequest ireduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    if (!dev(in, n) || !dev(out, n)) return staged_->ireduce_scatter_sum(in, out, n, d);
    CommRequest r;
    check(ops_->reduce_scatter_sum(dc_, in, out, n, int(d), 1, &r.id, why_, sizeof why_));
    return r;
  }
  bool progresses_async() const override { return ops_->progresses_async != 0; }
  void wait(CommRequest r) override {
    if (r.id >= 0) check(ops_->wait(dc_, r.id, why_, sizeof why_));
  }
  void all_gather(const void* in, void* out, long n, Dtype d) override {
    if (!dev(in, n) || !dev(out, n)) return staged_->all_gather(in, out, n, d);
    long req = -1;
    check(ops_->all_gather(dc_, in, out, n, int(d), 0, &req, why_, sizeof why_));
  }
  CommRequest iall_gather(const void* in, void* out, long n, Dtype d) override {
    if (!dev(in, n) || !dev(out, n * size())) return staged_->iall_gather(in, out, n, d);
    CommRequest r;
    check(ops_->all_gather(dc_, in, out, n, int(d), 1, &r.id, why_, sizeof why_));
    return r;
  }
  void broadcast(void* buf, long n, Dtype d, int root) override {
    if (!dev(buf, n)) return staged_->broadcast(buf, n, d, root);
    check(ops_->broadcast(dc_, buf, n, int(d), root, why_, sizeof why_));
  }
  void reduce_sum(const void* in, void* out, long n, Dtype d, int root) override {
    // (a device `in`, and out on the device or null off the root, as NCCL allows: the same on every rank)
    if (!dev(in, n) || (out && !dev(out, n))) return staged_->reduce_sum(in, out, n, d, root);
    check(ops_->reduce_sum(dc_, in, out, n, int(d), root, why_, sizeof why_));
  }
  void all_to_all(const void* in, void* out, long n, Dtype d) override {
    if (!dev(in, n) || !dev(out, n)) return staged_->all_to_all(in, out, n, d);
    check(ops_->all_to_all(dc_, in, out, n, int(d), why_, sizeof why_));
  }
  // The pipeline's exchanges: one device group when every buffer is device memory (its sends complete in stream
  // order), else the host communicator's, staged.
  void exchange(const std::vector<P2pOp>& ops) override {
    bool all_dev = !ops.empty();
    for (const P2pOp& o : ops) all_dev = all_dev && dev(o.buf, o.n);
    if (!all_dev || !ops_->p2p_group) {
      staged_->exchange(ops);
      for (const P2pOp& o : ops)
        if (o.send) sends_.push_back(0);
      return;
    }
    std::vector<DeviceP2p> d;
    for (const P2pOp& o : ops) d.push_back({o.send ? 1 : 0, o.buf, o.n, int(o.d), o.peer});
    check(ops_->p2p_group(dc_, d.data(), int(d.size()), why_, sizeof why_));
    for (const P2pOp& o : ops)
      if (o.send) sends_.push_back(1);
  }
  // Blocking point to point and the barrier: the host communicator.
  void send(const void* buf, long n, Dtype d, int dst, int tag) override { staged_->send(buf, n, d, dst, tag); }
  void recv(void* buf, long n, Dtype d, int src, int tag) override { staged_->recv(buf, n, d, src, tag); }
  void isend(const void* buf, long n, Dtype d, int dst, int tag) override {
    staged_->isend(buf, n, d, dst, tag);
    sends_.push_back(0);
  }
  void wait_sends() override {
    staged_->wait_sends();
    sends_.clear();
    staged_done_ = 0;
  }
  // Sends in call order: a device group's are done (stream order), a host one's when the staged communicator says.
  int reap_sends() override {
    staged_done_ += staged_->reap_sends();
    int k = 0;
    while (!sends_.empty() && (sends_.front() || staged_done_ > 0)) {
      if (!sends_.front()) --staged_done_;
      sends_.pop_front();
      ++k;
    }
    return k;
  }
  void barrier() override { staged_->barrier(); }
  [[noreturn]] void abort(int code, const std::string& message) override {
    host_->abort(code, message);
    std::abort();  // not reached: Comm::abort does not return
  }

 private:
  // A buffer of n > 0 elements in the backend's device memory (an empty one goes the host way: nothing to move).
  bool dev(const void* p, long n) const { return n > 0 && on_device(*be_, p); }
  void check(int rc) const {
    if (rc != 0) throw std::runtime_error(std::string(ops_->name) + ": " + why_);
  }

  const DeviceCommOps* ops_;
  void* dc_;
  Comm* host_;
  std::unique_ptr<Comm> host_own_;
  const Backend* be_;
  std::unique_ptr<Comm> staged_;
  std::deque<char> sends_;  // outstanding sends, oldest first: 1 on the device (done), 0 through the host
  int staged_done_ = 0;     // host sends the staged communicator reported done, not yet counted
  mutable char why_[512] = "";
};

// Refuses (on every rank: the same all-gathered table) ranks that share a GPU, unless the library shares GPUs.
void refuse_shared_gpus(Comm& host, const DeviceCommOps& ops) {
  if (ops.shares_gpus || !ops.local_device) return;
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  const uint64_t h = std::hash<std::string>{}(name);
  const int32_t mine[3] = {int32_t(h & 0x7fffffff), int32_t((h >> 31) & 0x7fffffff), int32_t(ops.local_device())};
  std::vector<int32_t> all(size_t(3 * host.size()));
  host.all_gather(mine, all.data(), 3, Dtype::i32);
  for (int r = 0; r < host.size(); ++r)
    for (int s = r + 1; s < host.size(); ++s)
      if (std::equal(&all[size_t(3 * r)], &all[size_t(3 * r + 3)], &all[size_t(3 * s)]))
        throw DeviceCommRefused(std::string("--comm nccl: ranks ") + std::to_string(r) + " and " + std::to_string(s) +
                                " share GPU " + std::to_string(all[size_t(3 * r + 2)]) + " of one host; " + ops.name +
                                " refuses two ranks of one communicator on one GPU (NCCL 2.30 and later allow it with "
                                "NCCL_MULTI_RANK_GPU_ENABLE=1): run one rank per GPU, or --comm mpi");
}

}  // namespace

const DeviceCommOps* device_comm_ops(const Backend& be, std::string& why) {
  const std::string name = be.name;
  if (name == "emu-device") return &emu_nccl_ops();
  if (name != "cuda") {
    why = "--comm nccl: needs --backend cuda or emu-device (backend " + name + " has no device memory)";
    return nullptr;
  }
  return load_nccl_ops(why);
}

std::unique_ptr<Comm> device_comm(Comm& host, const Backend& be, const DeviceCommOps& ops) {
  refuse_shared_gpus(host, ops);
  char why[512] = "";
  std::vector<unsigned char> id(ops.id_bytes);
  int rc = host.rank() == 0 ? ops.unique_id(id.data(), why, sizeof why) : 0;
  int bad = rc != 0;  // every rank learns whether rank 0 made the id (no rank joins an id that does not exist)
  host.broadcast(&bad, 1, Dtype::i32, 0);
  if (bad) throw std::runtime_error(std::string(ops.name) + ": rank 0 could not make the bootstrap id" +
                                    (host.rank() == 0 ? std::string(": ") + why : std::string()));
  host.broadcast(id.data(), long(id.size()), Dtype::u8, 0);
  void* dc = nullptr;
  if (ops.init(&dc, id.data(), host.size(), host.rank(), why, sizeof why) != 0)
    host.abort(1, std::string(ops.name) + ": rank " + std::to_string(host.rank()) + ": " + why);  // (the others wait in init)
  return std::make_unique<DeviceComm>(ops, dc, &host, nullptr, be);
}

}  // namespace tp::exec
