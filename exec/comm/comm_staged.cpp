// comm_staged: host staging for a communicator whose buffers may be device memory (exec/comm/comm.hpp: Comm takes
// HOST pointers). Wraps a Comm for a backend with host_accessible == false: every buffer that lies in the
// backend's device memory (Backend::is_device_ptr) goes device -> pinned host buffer before the call and
// pinned -> device after it (for the outputs); host buffers (loss scalars, host parameters of offloaded layers)
// pass as they are. Sub-communicators (split) are staged too, so wrapping the world stages the whole run.
// Invariants: the backend's default-stream copies are synchronous (the host reads a staged buffer only after its
// copy completed); an isend's staging buffer lives until reap_sends / wait_sends says the send completed; the
// scratch buffers grow and are reused (pinned allocation is slow on a GPU); on a host-accessible backend the
// runtime never wraps (the CPU path is zero-copy).
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/comm.hpp"

namespace tp::exec {
namespace {

class Pinned {
 public:
  Pinned() = default;
  Pinned(const Backend* be, size_t bytes) : be_(be), p_(bytes ? be->alloc_pinned(bytes) : nullptr), bytes_(bytes) {
    if (bytes && !p_) throw std::bad_alloc();
  }
  ~Pinned() { if (p_) be_->free_pinned(p_); }
  Pinned(Pinned&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Pinned& operator=(Pinned&& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  const Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class StagedComm final : public Comm {
 public:
  StagedComm(Comm* in, std::unique_ptr<Comm> owned, const Backend& be) : in_(in), own_(std::move(owned)), be_(&be) {}
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  std::unique_ptr<Comm> split(int color, int key) override {
    std::unique_ptr<Comm> s = in_->split(color, key);
    if (!s) return s;
    Comm* raw = s.get();
    return std::make_unique<StagedComm>(raw, std::move(s), *be_);
  }
  void all_reduce_sum(void* buf, long n, Dtype d) override {
    const size_t b = bytes(n, d);
    if (!dev(buf)) return in_->all_reduce_sum(buf, n, d);
    void* h = down(0, buf, b);
    in_->all_reduce_sum(h, n, d);
    up(buf, h, b);
  }
  void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    const size_t b = bytes(n, d);
    const void* hi = dev(in) ? down(0, in, b * size()) : in;
    void* ho = dev(out) ? scratch(1, b) : out;
    in_->reduce_scatter_sum(hi, ho, n, d);
    if (ho != out) up(out, ho, b);
  }
  void all_gather(const void* in, void* out, long n, Dtype d) override {
    const size_t b = bytes(n, d);
    const void* hi = dev(in) ? down(0, in, b) : in;
    void* ho = dev(out) ? scratch(1, b * size()) : out;
    in_->all_gather(hi, ho, n, d);
    if (ho != out) up(out, ho, b * size());
  }
  void broadcast(void* buf, long n, Dtype d, int root) override {
    const size_t b = bytes(n, d);
    if (!dev(buf)) return in_->broadcast(buf, n, d, root);
    void* h = rank() == root ? down(0, buf, b) : scratch(0, b);
    in_->broadcast(h, n, d, root);
    if (rank() != root) up(buf, h, b);
  }
  void reduce_sum(const void* in, void* out, long n, Dtype d, int root) override {
    const size_t b = bytes(n, d);
    const void* hi = dev(in) ? down(0, in, b) : in;
    void* ho = out && dev(out) ? scratch(1, b) : out;
    in_->reduce_sum(hi, ho, n, d, root);
    if (ho != out && rank() == root) up(out, ho, b);
  }
  void all_to_all(const void* in, void* out, long n, Dtype d) override {
    const size_t b = bytes(n, d) * size();
    const void* hi = dev(in) ? down(0, in, b) : in;
    void* ho = dev(out) ? scratch(1, b) : out;
    in_->all_to_all(hi, ho, n, d);
    if (ho != out) up(out, ho, b);
  }
  void send(const void* buf, long n, Dtype d, int dst, int tag) override {
    const size_t b = bytes(n, d);
    in_->send(dev(buf) ? down(0, buf, b) : buf, n, d, dst, tag);
  }
  void recv(void* buf, long n, Dtype d, int src, int tag) override {
    const size_t b = bytes(n, d);
    if (!dev(buf)) return in_->recv(buf, n, d, src, tag);
    void* h = scratch(0, b);
    in_->recv(h, n, d, src, tag);
    up(buf, h, b);
  }
  void isend(const void* buf, long n, Dtype d, int dst, int tag) override {
    const size_t b = bytes(n, d);
    Pinned h;
    if (dev(buf)) {  // its own staging buffer, alive until the send completes
      h = Pinned(be_, b);
      be_->copy(h.data(), buf, b, CopyKind::device_to_host, Stream{});
    }
    in_->isend(h.data() ? h.data() : buf, n, d, dst, tag);
    pending_.push_back(std::move(h));
  }
  // The group as one group of the inner communicator (its pairing is what keeps a rendezvous from deadlocking):
  // device sends staged into their own buffers (alive as an isend's), device receives into scratch, then up.
  void exchange(const std::vector<P2pOp>& ops) override {
    std::vector<P2pOp> h = ops;
    std::vector<Pinned> sent;
    size_t nrecv = 0;
    for (P2pOp& o : h) {
      const size_t b = bytes(o.n, o.d);
      if (!dev(o.buf)) {
        if (o.send) sent.emplace_back();
        continue;
      }
      if (o.send) {
        sent.emplace_back(be_, b);
        be_->copy(sent.back().data(), o.buf, b, CopyKind::device_to_host, Stream{});
        o.buf = sent.back().data();
      } else {
        if (recv_scratch_.size() <= nrecv) recv_scratch_.emplace_back();
        if (recv_scratch_[nrecv].bytes() < b) recv_scratch_[nrecv] = Pinned(be_, b);
        o.buf = recv_scratch_[nrecv++].data();
      }
    }
    in_->exchange(h);
    for (size_t i = 0; i < ops.size(); ++i)
      if (!ops[i].send && h[i].buf != ops[i].buf) up(ops[i].buf, h[i].buf, bytes(ops[i].n, ops[i].d));
    for (Pinned& p : sent) pending_.push_back(std::move(p));
  }
  void wait_sends() override {
    in_->wait_sends();
    pending_.clear();
  }
  int reap_sends() override {
    const int k = in_->reap_sends();
    for (int i = 0; i < k && !pending_.empty(); ++i) pending_.pop_front();
    return k;
  }
  void barrier() override { in_->barrier(); }
  [[noreturn]] void abort(int code, const std::string& message) override {
    in_->abort(code, message);
    std::abort();  // not reached: Comm::abort does not return
  }

 private:
  static size_t bytes(long n, Dtype d) { return n > 0 ? dtype_bytes(d) * (size_t)n : 0; }
  bool dev(const void* p) const { return p && on_device(*be_, p); }
  void* scratch(int i, size_t b) {
    if (scratch_[i].bytes() < b) scratch_[i] = Pinned(be_, b);
    return scratch_[i].data();
  }
  void* down(int i, const void* d, size_t b) {  // device -> scratch i
    void* h = scratch(i, b);
    if (b) be_->copy(h, d, b, CopyKind::device_to_host, Stream{});
    return h;
  }
  void up(void* d, const void* h, size_t b) {
    if (b) be_->copy(d, h, b, CopyKind::host_to_device, Stream{});
  }
  Comm* in_;
  std::unique_ptr<Comm> own_;
  const Backend* be_;
  Pinned scratch_[2];
  std::vector<Pinned> recv_scratch_;  // an exchange's receives, one each
  std::deque<Pinned> pending_;  // per outstanding isend, oldest first (empty when its buffer was host memory)
};

}  // namespace

std::unique_ptr<Comm> staged_comm(Comm& inner, const Backend& be) {
  return std::make_unique<StagedComm>(&inner, nullptr, be);
}

}  // namespace tp::exec
