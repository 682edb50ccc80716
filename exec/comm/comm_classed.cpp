// comm_classed: the classed communicator wrapper (comm_classed.hpp).
#include "exec/comm/comm_classed.hpp"

#include <cstdlib>
#include <string>

namespace tp::exec::prof {

namespace {

// Forwards every call to `in_`, timed as class c_ (nested scopes in the MPI communicator then do not count).
class ClassedComm final : public Comm {
 public:
  ClassedComm(std::unique_ptr<Comm> in, Cls c) : in_(std::move(in)), c_(c) {}
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  std::unique_ptr<Comm> split(int color, int key) override { return classed(in_->split(color, key), c_); }
  void all_reduce_sum(void* buf, long n, Dtype d) override { S s(c_); in_->all_reduce_sum(buf, n, d); }
  void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    S s(c_);
    in_->reduce_scatter_sum(in, out, n, d);
  }
  CommRequest iall_reduce_sum(void* buf, long n, Dtype d) override { S s(c_); return in_->iall_reduce_sum(buf, n, d); }
  CommRequest ireduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    S s(c_);
    return in_->ireduce_scatter_sum(in, out, n, d);
  }
  CommRequest iall_gather(const void* in, void* out, long n, Dtype d) override {
    S s(c_);
    return in_->iall_gather(in, out, n, d);
  }
  void wait(CommRequest r) override { S s(c_); in_->wait(r); }
  bool progresses_async() const override { return in_->progresses_async(); }
  void all_gather(const void* in, void* out, long n, Dtype d) override { S s(c_); in_->all_gather(in, out, n, d); }
  void broadcast(void* buf, long n, Dtype d, int root) override { S s(c_); in_->broadcast(buf, n, d, root); }
  void reduce_sum(const void* in, void* out, long n, Dtype d, int root) override {
    S s(c_);
    in_->reduce_sum(in, out, n, d, root);
  }
  void all_to_all(const void* in, void* out, long n, Dtype d) override { S s(c_); in_->all_to_all(in, out, n, d); }
  void send(const void* buf, long n, Dtype d, int dst, int tag) override { S s(c_); in_->send(buf, n, d, dst, tag); }
  void recv(void* buf, long n, Dtype d, int src, int tag) override { S s(c_); in_->recv(buf, n, d, src, tag); }
  void isend(const void* buf, long n, Dtype d, int dst, int tag) override { S s(c_); in_->isend(buf, n, d, dst, tag); }
  void wait_sends() override { S s(c_); in_->wait_sends(); }
  int reap_sends() override { S s(c_); return in_->reap_sends(); }
  void exchange(const std::vector<P2pOp>& ops) override { S s(c_); in_->exchange(ops); }
  void barrier() override { S s(c_); in_->barrier(); }
  [[noreturn]] void abort(int code, const std::string& message) override {
    in_->abort(code, message);
    std::abort();  // not reached: Comm::abort does not return
  }

 private:
  struct S {  // the class for nested comm scopes, and the time
    CommClass cc;
    Scope sc;
    explicit S(Cls c) : cc(c), sc(c) {}
  };
  std::unique_ptr<Comm> in_;
  Cls c_;
};

}  // namespace

std::unique_ptr<Comm> classed(std::unique_ptr<Comm> inner, Cls c) {
  if (!inner) return nullptr;
  return std::make_unique<ClassedComm>(std::move(inner), c);
}

}  // namespace tp::exec::prof
