// comm_local: the one-rank communicator (rank 0 of 1) and, in builds without MPI, world() / finalize_world().
// Invariants: every collective on one rank is a copy of its input (a rank-ordered sum over one rank is the
// value itself), so a single-process run goes through exactly the code paths of a parallel run with size 1.
// Point-to-point to self would deadlock a blocking runtime, so send/recv throw std::logic_error. Sums accept
// f32, f64 and i32 only (std::invalid_argument otherwise), the same rule as the MPI communicator.
#include "exec/comm/comm.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tp::exec {

size_t dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::f32: return 4;
    case Dtype::f64: return 8;
    case Dtype::i32: return 4;
    case Dtype::u8: return 1;
  }
  throw std::invalid_argument("dtype_bytes: unknown Dtype " + std::to_string(static_cast<int>(d)));
}

namespace {

void check_sum_dtype(Dtype d, const char* what) {
  if (d != Dtype::f32 && d != Dtype::f64 && d != Dtype::i32)
    throw std::invalid_argument(std::string(what) + ": sums need f32, f64 or i32, got u8");
}

void check_count(long n, const char* what) {
  if (n < 0) throw std::invalid_argument(std::string(what) + ": negative element count " + std::to_string(n));
}

void copy(void* out, const void* in, long n, Dtype d) {
  if (n == 0 || out == in) return;
  std::memmove(out, in, static_cast<size_t>(n) * dtype_bytes(d));
}

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Comm> split(int color, int /*key*/) override {
    if (color < 0) return nullptr;  // MPI_UNDEFINED-like: not a member of any group
    return std::make_unique<LocalComm>();
  }
  void all_reduce_sum(void* /*buf*/, long n, Dtype d) override {
    check_count(n, "all_reduce_sum");
    check_sum_dtype(d, "all_reduce_sum");
  }
  void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    check_count(n, "reduce_scatter_sum");
    check_sum_dtype(d, "reduce_scatter_sum");
    copy(out, in, n, d);
  }
  void all_gather(const void* in, void* out, long n, Dtype d) override {
    check_count(n, "all_gather");
    copy(out, in, n, d);
  }
  void broadcast(void* /*buf*/, long n, Dtype d, int root) override {
    check_count(n, "broadcast");
    dtype_bytes(d);
    check_root(root, "broadcast");
  }
  void reduce_sum(const void* in, void* out, long n, Dtype d, int root) override {
    check_count(n, "reduce_sum");
    check_sum_dtype(d, "reduce_sum");
    check_root(root, "reduce_sum");
    if (out) copy(out, in, n, d);
  }
  void all_to_all(const void* in, void* out, long n, Dtype d) override {
    check_count(n, "all_to_all");
    copy(out, in, n, d);
  }
  void send(const void*, long, Dtype, int dst, int tag) override {
    throw std::logic_error("send: the one-rank communicator has no peer (dst " + std::to_string(dst) + ", tag " +
                           std::to_string(tag) + ")");
  }
  void isend(const void*, long, Dtype, int dst, int tag) override {
    throw std::logic_error("isend: the one-rank communicator has no peer (dst " + std::to_string(dst) + ", tag " +
                           std::to_string(tag) + ")");
  }
  void wait_sends() override {}
  int reap_sends() override { return 0; }
  void recv(void*, long, Dtype, int src, int tag) override {
    throw std::logic_error("recv: the one-rank communicator has no peer (src " + std::to_string(src) + ", tag " +
                           std::to_string(tag) + ")");
  }
  void barrier() override {}
  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "error: rank 0: %s\n", message.c_str());
    std::fflush(stderr);
    std::exit(code);
  }

 private:
  static void check_root(int root, const char* what) {
    if (root != 0)
      throw std::invalid_argument(std::string(what) + ": root " + std::to_string(root) +
                                  " out of range for a one-rank communicator");
  }
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() { return std::make_unique<LocalComm>(); }

#ifndef TRAINPLAN_MPI
// Built without MPI: the world is always one rank.
Comm& world() {
  static LocalComm w;
  return w;
}
void finalize_world() {}
#endif

}  // namespace tp::exec
