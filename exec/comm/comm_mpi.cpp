// comm_mpi: the MPI communicator, and world() / finalize_world() in builds with MPI (TRAINPLAN_MPI).
// Invariants:
// - MPI is initialised (MPI_Init_thread, FUNNELED) on the first world() call, and only when the process was
//   launched by mpirun / srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or SLURM_NTASKS in the environment)
//   or MPI is already initialised; otherwise world() is the one-rank communicator and MPI is never touched.
// - Every sum (all_reduce_sum, reduce_scatter_sum, reduce_sum) is the rank-ordered sum ((x0 + x1) + x2) + ...
//   computed by ONE rank per element from the raw contributions (gathered with all-to-all / gather) and then
//   copied to the others, so results are bit-identical across reruns, across ranks, and independent of message
//   arrival order. all_reduce_sum is reduce-scatter (each rank owns a contiguous segment) + all-gather, so its
//   traffic and extra memory are O(n), like a ring all-reduce.
// - Large buffers are processed in chunks of at most chunk_elems() elements (so int MPI counts never overflow
//   and temporaries stay bounded); chunking never changes results.
// - TP_COMM_RENDEZVOUS=<seconds> (a test stand-in for NCCL's point-to-point semantics): every send completes only
//   once its receive has started (MPI_Issend), isend blocks like send, and an exchange's group completes when all
//   its sends and receives have; an operation still waiting after that many seconds aborts the job naming it (a
//   deadlock on a GPU). Tags and rank-ordered sums are unchanged, so results are too.
// - Errors stay MPI_ERRORS_ARE_FATAL; abort() prints "error: rank R: msg" and MPI_Abort's the whole job. A rank
//   that exits without finalize_world() also makes mpirun kill the job (no atexit hook on purpose).
#include "exec/comm/comm.hpp"
#include "exec/prof/prof.hpp"

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tp::exec {

namespace detail {
// Elements per chunk of a collective (tests lower it to exercise the chunked paths). Default 2^26.
long g_mpi_chunk_elems = 1L << 26;
void set_mpi_chunk_elems(long n) { g_mpi_chunk_elems = std::clamp(n, 1L, static_cast<long>(INT_MAX)); }
}  // namespace detail

namespace {

long chunk_elems() { return detail::g_mpi_chunk_elems; }

MPI_Datatype mpi_type(Dtype d) {
  switch (d) {
    case Dtype::f32: return MPI_FLOAT;
    case Dtype::f64: return MPI_DOUBLE;
    case Dtype::i32: return MPI_INT32_T;
    case Dtype::u8: return MPI_UINT8_T;
  }
  throw std::invalid_argument("comm: unknown Dtype " + std::to_string(static_cast<int>(d)));
}

void check_sum_dtype(Dtype d, const char* what) {
  if (d != Dtype::f32 && d != Dtype::f64 && d != Dtype::i32)
    throw std::invalid_argument(std::string(what) + ": sums need f32, f64 or i32, got u8");
}

void check_count(long n, const char* what) {
  if (n < 0) throw std::invalid_argument(std::string(what) + ": negative element count " + std::to_string(n));
}

template <class T>
void add_into(T* acc, const T* x, long k) {
  for (long i = 0; i < k; ++i) acc[i] += x[i];
}
void add_into_i32(int32_t* acc, const int32_t* x, long k) {  // wrap-around, no signed-overflow UB
  for (long i = 0; i < k; ++i)
    acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(x[i]));
}

// out[k] = ((blk0 + blk1) + blk2) + ... where block s is blocks + s * stride elements (rank order).
void sum_blocks(void* out, const void* blocks, int nblocks, long k, long stride, Dtype d) {
  const size_t eb = dtype_bytes(d);
  const auto* b = static_cast<const unsigned char*>(blocks);
  std::memcpy(out, b, static_cast<size_t>(k) * eb);
  for (int s = 1; s < nblocks; ++s) {
    const void* x = b + static_cast<size_t>(s) * static_cast<size_t>(stride) * eb;
    switch (d) {
      case Dtype::f32: add_into(static_cast<float*>(out), static_cast<const float*>(x), k); break;
      case Dtype::f64: add_into(static_cast<double*>(out), static_cast<const double*>(x), k); break;
      case Dtype::i32: add_into_i32(static_cast<int32_t*>(out), static_cast<const int32_t*>(x), k); break;
      case Dtype::u8: throw std::invalid_argument("sum of u8");
    }
  }
}

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return abytes && bbytes && pa < pb + bbytes && pb < pa + abytes;
}

// The input of a collective, copied into `keep` when it overlaps the output (MPI forbids aliasing).
const void* detached(const void* in, size_t in_bytes, const void* out, size_t out_bytes, std::vector<unsigned char>& keep) {
  if (!overlaps(in, in_bytes, out, out_bytes)) return in;
  keep.assign(static_cast<const unsigned char*>(in), static_cast<const unsigned char*>(in) + in_bytes);
  return keep.data();
}

unsigned char* at(void* p, long elems, Dtype d) {
  return static_cast<unsigned char*>(p) + static_cast<size_t>(elems) * dtype_bytes(d);
}
const unsigned char* at(const void* p, long elems, Dtype d) {
  return static_cast<const unsigned char*>(p) + static_cast<size_t>(elems) * dtype_bytes(d);
}

// TP_COMM_RENDEZVOUS's seconds, 0 when unset (see the file comment).
double rendezvous_timeout_s() {
  static const double t = [] {
    const char* v = std::getenv("TP_COMM_RENDEZVOUS");
    return v && *v ? std::max(0.0, std::atof(v)) : 0.0;
  }();
  return t;
}

int world_rank_or_zero() {
  int inited = 0, fin = 0, r = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owned_ && !fin && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // color < 0 means "in no group" (MPI_UNDEFINED): the call is still collective, and returns nullptr.
  std::unique_ptr<Comm> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(sub, true);
  }

  void all_reduce_sum(void* buf, long n, Dtype d) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "all_reduce_sum");
    check_sum_dtype(d, "all_reduce_sum");
    if (size_ == 1 || n == 0) return;
    const MPI_Datatype t = mpi_type(d);
    const size_t eb = dtype_bytes(d);
    std::vector<int> counts(size_), displs(size_), rcounts(size_), rdispls(size_);
    std::vector<unsigned char> tmp;
    for (long off = 0; off < n; off += chunk_elems()) {
      const long k = std::min(chunk_elems(), n - off);
      for (int r = 0, acc = 0; r < size_; ++r) {
        counts[r] = static_cast<int>(k / size_ + (r < k % size_ ? 1 : 0));
        displs[r] = acc;
        acc += counts[r];
      }
      const int mine = counts[rank_];
      for (int s = 0; s < size_; ++s) {
        rcounts[s] = mine;
        rdispls[s] = s * mine;
      }
      tmp.resize(static_cast<size_t>(mine) * size_ * eb);
      unsigned char* p = at(buf, off, d);
      // Segment r of this chunk goes to rank r; rank r adds the contributions in rank order ...
      MPI_Alltoallv(p, counts.data(), displs.data(), t, tmp.data(), rcounts.data(), rdispls.data(), t, comm_);
      if (mine > 0) sum_blocks(p + static_cast<size_t>(displs[rank_]) * eb, tmp.data(), size_, mine, mine, d);
      // ... and every rank receives every reduced segment.
      MPI_Allgatherv(MPI_IN_PLACE, 0, t, p, counts.data(), displs.data(), t, comm_);
    }
  }

  void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "reduce_scatter_sum");
    check_sum_dtype(d, "reduce_scatter_sum");
    if (n == 0) return;
    const size_t eb = dtype_bytes(d);
    const size_t in_bytes = static_cast<size_t>(n) * size_ * eb, out_bytes = static_cast<size_t>(n) * eb;
    if (size_ == 1) {
      std::memmove(out, in, out_bytes);
      return;
    }
    std::vector<unsigned char> in_copy;
    in = detached(in, in_bytes, out, out_bytes, in_copy);
    const MPI_Datatype t = mpi_type(d);
    const long step = std::max(1L, chunk_elems() / size_);
    std::vector<unsigned char> pack, tmp;
    for (long off = 0; off < n; off += step) {
      const long k = std::min(step, n - off);
      const void* send = in;
      if (k != n) {  // chunked: pack [r * n + off, + k) of every block r contiguously
        pack.resize(static_cast<size_t>(k) * size_ * eb);
        for (int r = 0; r < size_; ++r)
          std::memcpy(pack.data() + static_cast<size_t>(r) * k * eb, at(in, static_cast<long>(r) * n + off, d),
                      static_cast<size_t>(k) * eb);
        send = pack.data();
      }
      tmp.resize(static_cast<size_t>(k) * size_ * eb);
      MPI_Alltoall(send, static_cast<int>(k), t, tmp.data(), static_cast<int>(k), t, comm_);
      sum_blocks(at(out, off, d), tmp.data(), size_, k, k, d);
    }
  }

  void all_gather(const void* in, void* out, long n, Dtype d) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "all_gather");
    if (n == 0) return;
    const size_t eb = dtype_bytes(d);
    const size_t in_bytes = static_cast<size_t>(n) * eb, out_bytes = in_bytes * size_;
    std::vector<unsigned char> in_copy;
    in = detached(in, in_bytes, out, out_bytes, in_copy);
    const MPI_Datatype t = mpi_type(d);
    if (n * size_ <= chunk_elems()) {
      MPI_Allgather(in, static_cast<int>(n), t, out, static_cast<int>(n), t, comm_);
      return;
    }
    const long step = std::max(1L, chunk_elems() / size_);
    std::vector<unsigned char> tmp;
    for (long off = 0; off < n; off += step) {
      const long k = std::min(step, n - off);
      tmp.resize(static_cast<size_t>(k) * size_ * eb);
      MPI_Allgather(at(in, off, d), static_cast<int>(k), t, tmp.data(), static_cast<int>(k), t, comm_);
      for (int s = 0; s < size_; ++s)
        std::memcpy(at(out, static_cast<long>(s) * n + off, d), tmp.data() + static_cast<size_t>(s) * k * eb,
                    static_cast<size_t>(k) * eb);
    }
  }

  void broadcast(void* buf, long n, Dtype d, int root) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "broadcast");
    check_rank(root, "broadcast root");
    const MPI_Datatype t = mpi_type(d);
    for (long off = 0; off < n; off += chunk_elems())
      MPI_Bcast(at(buf, off, d), static_cast<int>(std::min(chunk_elems(), n - off)), t, root, comm_);
  }

  void reduce_sum(const void* in, void* out, long n, Dtype d, int root) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "reduce_sum");
    check_sum_dtype(d, "reduce_sum");
    check_rank(root, "reduce_sum root");
    if (n == 0) return;
    const size_t eb = dtype_bytes(d);
    const bool is_root = rank_ == root;
    if (is_root && !out) throw std::invalid_argument("reduce_sum: out is null on the root");
    const MPI_Datatype t = mpi_type(d);
    const long step = std::max(1L, chunk_elems() / size_);
    std::vector<unsigned char> tmp;
    if (is_root) tmp.resize(static_cast<size_t>(std::min(step, n)) * size_ * eb);
    for (long off = 0; off < n; off += step) {
      const long k = std::min(step, n - off);
      // The chunk is gathered before out's chunk is written, so in == out on the root is safe.
      MPI_Gather(at(in, off, d), static_cast<int>(k), t, is_root ? tmp.data() : nullptr, static_cast<int>(k), t,
                 root, comm_);
      if (is_root) sum_blocks(at(out, off, d), tmp.data(), size_, k, k, d);
    }
  }

  void all_to_all(const void* in, void* out, long n, Dtype d) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "all_to_all");
    if (n == 0) return;
    const size_t eb = dtype_bytes(d);
    const size_t bytes = static_cast<size_t>(n) * size_ * eb;
    std::vector<unsigned char> in_copy;
    in = detached(in, bytes, out, bytes, in_copy);
    const MPI_Datatype t = mpi_type(d);
    if (n * size_ <= chunk_elems()) {
      MPI_Alltoall(in, static_cast<int>(n), t, out, static_cast<int>(n), t, comm_);
      return;
    }
    const long step = std::max(1L, chunk_elems() / size_);
    std::vector<unsigned char> pack, tmp;
    for (long off = 0; off < n; off += step) {
      const long k = std::min(step, n - off);
      const size_t kb = static_cast<size_t>(k) * eb;
      pack.resize(kb * size_);
      tmp.resize(kb * size_);
      for (int r = 0; r < size_; ++r) std::memcpy(pack.data() + r * kb, at(in, static_cast<long>(r) * n + off, d), kb);
      MPI_Alltoall(pack.data(), static_cast<int>(k), t, tmp.data(), static_cast<int>(k), t, comm_);
      for (int s = 0; s < size_; ++s) std::memcpy(at(out, static_cast<long>(s) * n + off, d), tmp.data() + s * kb, kb);
    }
  }

  void send(const void* buf, long n, Dtype d, int dst, int tag) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "send");
    check_rank(dst, "send dst");
    check_tag(tag, "send");
    const MPI_Datatype t = mpi_type(d);
    if (rendezvous_timeout_s() > 0) {  // (the stand-in: a synchronous send, watched)
      std::vector<MPI_Request> r;
      post(r, true, buf, n, d, dst, tag);
      wait_watched(r, "send to rank " + std::to_string(dst) + " tag " + std::to_string(tag));
      return;
    }
    // Messages with one (source, tag, comm) are non-overtaking, so the chunks arrive in order.
    long off = 0;
    do {
      const long k = std::min(chunk_elems(), n - off);
      MPI_Send(at(buf, off, d), static_cast<int>(k), t, dst, tag, comm_);
      off += k;
    } while (off < n);
  }

  void isend(const void* buf, long n, Dtype d, int dst, int tag) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "isend");
    check_rank(dst, "isend dst");
    check_tag(tag, "isend");
    const MPI_Datatype t = mpi_type(d);
    if (rendezvous_timeout_s() > 0) {  // (the stand-in: completes only as its receive runs, as ncclSend)
      std::vector<MPI_Request> r;
      post(r, true, buf, n, d, dst, tag);
      wait_watched(r, "isend to rank " + std::to_string(dst) + " tag " + std::to_string(tag));
      calls_.push_back(0);  // (complete)
      return;
    }
    long off = 0;
    int reqs = 0;
    do {
      const long k = std::min(chunk_elems(), n - off);
      pending_.emplace_back();
      MPI_Isend(at(buf, off, d), static_cast<int>(k), t, dst, tag, comm_, &pending_.back());
      off += k;
      ++reqs;
    } while (off < n);
    calls_.push_back(reqs);
  }

  void wait_sends() override {
    prof::Scope prof_scope(prof::comm_class());
    if (!pending_.empty()) MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    pending_.clear();
    calls_.clear();
  }

  int reap_sends() override {
    prof::Scope prof_scope(prof::comm_class());
    int done = 0;
    size_t first = 0;  // requests of the reaped calls
    while (done < static_cast<int>(calls_.size())) {
      const int k = calls_[done];
      int flag = k == 0;  // MPI_Testall leaves every request untouched unless all k are complete
      if (k > 0) MPI_Testall(k, pending_.data() + first, &flag, MPI_STATUSES_IGNORE);
      if (!flag) break;
      first += static_cast<size_t>(k);
      ++done;
    }
    if (done > 0) {
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(first));
      calls_.erase(calls_.begin(), calls_.begin() + done);
    }
    return done;
  }

  void recv(void* buf, long n, Dtype d, int src, int tag) override {
    prof::Scope prof_scope(prof::comm_class());
    check_count(n, "recv");
    check_rank(src, "recv src");
    check_tag(tag, "recv");
    const MPI_Datatype t = mpi_type(d);
    if (rendezvous_timeout_s() > 0) {
      std::vector<MPI_Request> r;
      post(r, false, buf, n, d, src, tag);
      wait_watched(r, "recv from rank " + std::to_string(src) + " tag " + std::to_string(tag));
      return;
    }
    long off = 0;
    do {
      const long k = std::min(chunk_elems(), n - off);
      MPI_Status st;
      MPI_Recv(at(buf, off, d), static_cast<int>(k), t, src, tag, comm_, &st);
      int got = 0;
      MPI_Get_count(&st, t, &got);
      if (got != k)
        abort(1, "recv from rank " + std::to_string(src) + " tag " + std::to_string(tag) + ": expected " +
                     std::to_string(k) + " elements, got " + std::to_string(got));
      off += k;
    } while (off < n);
  }

  // Default: buffered sends, then receives (Comm::exchange). The rendezvous stand-in posts the whole group and
  // waits for all of it, as ncclGroupEnd's kernel does.
  void exchange(const std::vector<P2pOp>& ops) override {
    if (rendezvous_timeout_s() <= 0) return Comm::exchange(ops);
    prof::Scope prof_scope(prof::comm_class());
    std::vector<MPI_Request> r;
    std::string what = "exchange {";
    for (const P2pOp& o : ops) {
      check_count(o.n, "exchange");
      check_rank(o.peer, "exchange peer");
      check_tag(o.tag, "exchange");
      post(r, o.send, o.buf, o.n, o.d, o.peer, o.tag);
      what += std::string(o.send ? " send to " : " recv from ") + std::to_string(o.peer) + " tag " + std::to_string(o.tag);
    }
    wait_watched(r, what + " }");
    for (const P2pOp& o : ops)
      if (o.send) calls_.push_back(0);  // (complete)
  }

  void barrier() override {
    prof::Scope prof_scope(prof::comm_class());
    MPI_Barrier(comm_);
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "error: rank %d: %s\n", world_rank_or_zero(), message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
    std::_Exit(code == 0 ? 1 : code);  // not reached
  }

 private:
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= size_)
      throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(r) + " out of range [0, " +
                                  std::to_string(size_) + ")");
  }
  static void check_tag(int tag, const char* what) {
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    const int max_tag = flag ? *static_cast<int*>(ub) : 32767;
    if (tag < 0 || tag > max_tag)
      throw std::invalid_argument(std::string(what) + ": tag " + std::to_string(tag) + " out of range [0, " +
                                  std::to_string(max_tag) + "]");
  }

  // The rendezvous stand-in: buf's n elements as synchronous sends (or receives) of at most chunk_elems() each.
  void post(std::vector<MPI_Request>& r, bool send, const void* buf, long n, Dtype d, int peer, int tag) {
    const MPI_Datatype t = mpi_type(d);
    long off = 0;
    do {
      const long k = std::min(chunk_elems(), n - off);
      r.emplace_back();
      if (send) MPI_Issend(at(buf, off, d), static_cast<int>(k), t, peer, tag, comm_, &r.back());
      else MPI_Irecv(const_cast<unsigned char*>(at(buf, off, d)), static_cast<int>(k), t, peer, tag, comm_, &r.back());
      off += k;
    } while (off < n);
  }
  // Waits for r; past TP_COMM_RENDEZVOUS's seconds, aborts the job naming `what` (a deadlock under NCCL).
  void wait_watched(std::vector<MPI_Request>& r, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long polls = 0;; ++polls) {
      int flag = 0;
      MPI_Testall(static_cast<int>(r.size()), r.data(), &flag, MPI_STATUSES_IGNORE);
      if (flag) return;
      if (polls > 1000) usleep(100);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > rendezvous_timeout_s())
        abort(3, what + " has waited " + std::to_string(int(waited)) + " s under TP_COMM_RENDEZVOUS (sends complete "
                        "only as their receives run, as NCCL's): a deadlock on a GPU");
    }
  }

  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;  // outstanding isend chunks
  std::vector<int> calls_;             // requests per outstanding isend call, oldest first
  bool owned_;
  int rank_ = 0, size_ = 1;
};

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"})
    if (std::getenv(v)) return true;
  return false;
}

Comm* make_world() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) throw std::logic_error("world(): MPI was already finalised");
  if (!inited && !launched_by_mpi()) return make_local_comm().release();
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  return new MpiComm(MPI_COMM_WORLD, false);
}

}  // namespace

Comm& world() {
  static Comm* w = make_world();  // never deleted: it may outlive MPI_Finalize
  return *w;
}

void finalize_world() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Finalize();
}

}  // namespace tp::exec
