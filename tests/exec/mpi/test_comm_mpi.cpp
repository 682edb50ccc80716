// MPI communicator test (exec/comm/comm_mpi.cpp), run by ctest under mpirun with 4 ranks (exec.comm_mpi_4). Plain
// main, no GoogleTest: every rank runs every check; failures are printed by the failing rank, the summary by
// rank 0; the exit code is non-zero when any rank failed. Checks: each collective's values for f32 / f64 / i32
// / u8 and awkward sizes (0, 1, fewer elements than ranks, not divisible), sums bit-identical to the rank-ordered
// sum ((x0 + x1) + x2) + x3 on every rank and across reruns, sub-communicators (2 x 2 and reversed keys),
// all_to_all blocks, a send/recv ring, tag matching and non-blocking sends (isend / reap_sends). Everything runs twice: with the default chunk size and
// with tiny chunks, which must not change any result.
// Modes: `--expect-size N` (default 4; 1 when run without mpirun: world() must then be the one-rank
// communicator); `--abort` (rank 1 calls abort(3, "boom") while the others wait in a barrier; the job must
// end, non-zero; checked by check_abort.cmake); `--deadlock` (run under TP_COMM_RENDEZVOUS: ranks 0 and 1 each
// send to the other, then receive, one exchange each; NCCL's semantics make that a deadlock, and the stand-in must
// end the job naming it; check_abort.cmake with MATCH).
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"

namespace tp::exec::detail {
void set_mpi_chunk_elems(long n);  // exec/comm/comm_mpi.cpp (test hook)
}

using namespace tp::exec;

namespace {

int g_failures = 0;
int g_rank = 0;

#define CHECK(cond)                                                                                        \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      ++g_failures;                                                                                        \
      std::fprintf(stderr, "rank %d: FAIL %s:%d: %s (%s)\n", g_rank, __FILE__, __LINE__, #cond, g_ctx.c_str()); \
    }                                                                                                      \
  } while (0)

std::string g_ctx;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// A value of rank r at index i, spread over 16 orders of magnitude so that summation order matters.
double val(int r, long i, int salt = 0) {
  const uint64_t h = mix((static_cast<uint64_t>(r) << 40) ^ static_cast<uint64_t>(i) ^ (static_cast<uint64_t>(salt) << 56));
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0 - 0.5;
  return u * std::pow(10.0, static_cast<int>((h >> 3) % 17) - 8);
}
template <class T>
T tval(int r, long i, int salt = 0) {
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(mix(r * 1000003L + i + salt) % 2000001) - 1000000;
  else return static_cast<T>(val(r, i, salt));
}
template <class T>
constexpr Dtype dt() {
  if constexpr (std::is_same_v<T, float>) return Dtype::f32;
  if constexpr (std::is_same_v<T, double>) return Dtype::f64;
  if constexpr (std::is_same_v<T, int32_t>) return Dtype::i32;
  return Dtype::u8;
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
// The rank-ordered sum over the members of `order` (world ranks in communicator rank order).
template <class T>
T ordered_sum(const std::vector<int>& order, long i, int salt) {
  T acc = tval<T>(order[0], i, salt);
  for (size_t k = 1; k < order.size(); ++k) acc = static_cast<T>(acc + tval<T>(order[k], i, salt));
  return acc;
}

// Every rank holds the same bytes (checked by gathering a hash).
template <class T>
void check_same_everywhere(Comm& c, const std::vector<T>& v) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  std::vector<int32_t> mine = {static_cast<int32_t>(h), static_cast<int32_t>(h >> 32)}, all(2 * c.size());
  c.all_gather(mine.data(), all.data(), 2, Dtype::i32);
  for (int r = 0; r < c.size(); ++r) CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
}

// `me` is this process's world rank, `order` the world ranks of c in c's rank order.
template <class T>
void check_sums(Comm& c, int me, const std::vector<int>& order, long n, int salt) {
  const int P = c.size(), r = c.rank();
  g_ctx = "sums n=" + std::to_string(n) + " P=" + std::to_string(P) + " bytes=" + std::to_string(sizeof(T));
  // all_reduce_sum, twice: bit-identical to the ordered sum, to the rerun and across ranks.
  std::vector<T> expect(n);
  for (long i = 0; i < n; ++i) expect[i] = ordered_sum<T>(order, i, salt);
  std::vector<T> runs[2];
  for (auto& v : runs) {
    v.resize(n);
    for (long i = 0; i < n; ++i) v[i] = tval<T>(me, i, salt);
    c.all_reduce_sum(v.data(), n, dt<T>());
    CHECK(same_bits(v, expect));
  }
  CHECK(same_bits(runs[0], runs[1]));
  check_same_everywhere(c, runs[0]);
  // reduce_scatter_sum: block b of rank q's input is tval(q, b * n + i); rank r gets block r's ordered sum.
  std::vector<T> in(n * P), out(n, T(-1));
  for (long i = 0; i < n * P; ++i) in[i] = tval<T>(me, i, salt + 1);
  c.reduce_scatter_sum(in.data(), out.data(), n, dt<T>());
  std::vector<T> rs_expect(n);
  for (long i = 0; i < n; ++i) rs_expect[i] = ordered_sum<T>(order, static_cast<long>(r) * n + i, salt + 1);
  CHECK(same_bits(out, rs_expect));
  // reduce_sum to the first and the last rank; out is null elsewhere.
  for (int root : {0, P - 1}) {
    std::vector<T> src(n), dst(n, T(-1));
    for (long i = 0; i < n; ++i) src[i] = tval<T>(me, i, salt);
    c.reduce_sum(src.data(), r == root ? dst.data() : nullptr, n, dt<T>(), root);
    if (r == root) CHECK(same_bits(dst, expect));
    // In place on the root.
    c.reduce_sum(src.data(), r == root ? src.data() : nullptr, n, dt<T>(), root);
    if (r == root) CHECK(same_bits(src, expect));
  }
}

template <class T>
void check_moves(Comm& c, int me, const std::vector<int>& order, long n) {
  const int P = c.size(), r = c.rank();
  g_ctx = "moves n=" + std::to_string(n) + " P=" + std::to_string(P) + " bytes=" + std::to_string(sizeof(T));
  // all_gather
  std::vector<T> in(n), out(n * P, T(0));
  for (long i = 0; i < n; ++i) in[i] = tval<T>(me, i, 5);
  c.all_gather(in.data(), out.data(), n, dt<T>());
  for (int q = 0; q < P; ++q)
    for (long i = 0; i < n; ++i) CHECK(out[q * n + i] == tval<T>(order[q], i, 5));
  // all_gather in place (input is this rank's block of out)
  std::vector<T> inplace(n * P, T(0));
  for (long i = 0; i < n; ++i) inplace[r * n + i] = tval<T>(me, i, 5);
  c.all_gather(inplace.data() + r * n, inplace.data(), n, dt<T>());
  CHECK(same_bits(inplace, out));
  // broadcast from the last rank
  std::vector<T> b(n);
  for (long i = 0; i < n; ++i) b[i] = tval<T>(me, i, 6);
  c.broadcast(b.data(), n, dt<T>(), P - 1);
  for (long i = 0; i < n; ++i) CHECK(b[i] == tval<T>(order[P - 1], i, 6));
  // all_to_all: block q of rank s's input is tval(s, q * n + i); block s of rank r's output must be
  // tval(s, r * n + i). Then in place.
  std::vector<T> a_in(n * P), a_out(n * P, T(0));
  for (long i = 0; i < n * P; ++i) a_in[i] = tval<T>(me, i, 7);
  c.all_to_all(a_in.data(), a_out.data(), n, dt<T>());
  for (int s = 0; s < P; ++s)
    for (long i = 0; i < n; ++i) CHECK(a_out[s * n + i] == tval<T>(order[s], r * n + i, 7));
  c.all_to_all(a_in.data(), a_in.data(), n, dt<T>());
  CHECK(same_bits(a_in, a_out));
}

void check_u8(Comm& c, long n) {
  g_ctx = "u8 n=" + std::to_string(n);
  std::vector<uint8_t> b(n);
  for (long i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(c.rank() == 0 ? (i * 37 + 11) & 0xff : 0);
  c.broadcast(b.data(), n, Dtype::u8, 0);
  for (long i = 0; i < n; ++i) CHECK(b[i] == static_cast<uint8_t>((i * 37 + 11) & 0xff));
  std::vector<uint8_t> g(n * c.size());
  c.all_gather(b.data(), g.data(), n, Dtype::u8);
  for (long i = 0; i < n * c.size(); ++i) CHECK(g[i] == b[i % (n ? n : 1)]);
  bool threw = false;
  try {
    c.all_reduce_sum(b.data(), n, Dtype::u8);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

long g_max_n = 1L << 30;  // the chunked passes skip the large sizes (one collective per chunk is slow)

void check_ring(Comm& c) {
  const int P = c.size(), r = c.rank();
  if (P < 2) return;
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  for (long n : {1L, 16L, 200000L}) {  // the large one goes past the eager limit (rendezvous)
    g_ctx = "ring n=" + std::to_string(n);
    std::vector<double> out(n), in(n, -1);
    for (long i = 0; i < n; ++i) out[i] = val(r, i, 9);
    if (r % 2 == 0) {  // even ranks send first: blocking sends in a ring cannot deadlock
      c.send(out.data(), n, Dtype::f64, next, 3);
      c.recv(in.data(), n, Dtype::f64, prev, 3);
    } else {
      c.recv(in.data(), n, Dtype::f64, prev, 3);
      c.send(out.data(), n, Dtype::f64, next, 3);
    }
    for (long i = 0; i < n; ++i) CHECK(in[i] == val(prev, i, 9));
  }
  // Tags keep streams apart: two small messages received in the opposite order of sending.
  g_ctx = "tags";
  int32_t a = 100 + r, b = 200 + r, x = 0, y = 0;
  if (r % 2 == 0) {
    c.send(&a, 1, Dtype::i32, next, 7);
    c.send(&b, 1, Dtype::i32, next, 8);
    c.recv(&y, 1, Dtype::i32, prev, 8);
    c.recv(&x, 1, Dtype::i32, prev, 7);
  } else {
    c.recv(&y, 1, Dtype::i32, prev, 8);
    c.recv(&x, 1, Dtype::i32, prev, 7);
    c.send(&a, 1, Dtype::i32, next, 7);
    c.send(&b, 1, Dtype::i32, next, 8);
  }
  CHECK(x == 100 + prev && y == 200 + prev);
  // Non-blocking sends: reap_sends counts completed isend calls in call order (never more than are
  // outstanding) and forgets them; once the peer has received everything, they all complete.
  g_ctx = "isend / reap_sends";
  {
    const std::vector<long> sizes = {16, std::min(200000L, g_max_n), 5};
    std::vector<std::vector<double>> outs, ins;
    for (size_t k = 0; k < sizes.size(); ++k) {
      outs.emplace_back(sizes[k]);
      for (long i = 0; i < sizes[k]; ++i) outs[k][i] = val(r, i, 20 + (int)k);
      c.isend(outs[k].data(), sizes[k], Dtype::f64, next, 30 + (int)k);
    }
    int reaped = c.reap_sends();
    CHECK(reaped >= 0 && reaped <= 3);
    for (size_t k = 0; k < sizes.size(); ++k) {
      ins.emplace_back(sizes[k], -1.0);
      c.recv(ins[k].data(), sizes[k], Dtype::f64, prev, 30 + (int)k);
      for (long i = 0; i < sizes[k]; ++i) CHECK(ins[k][i] == val(prev, i, 20 + (int)k));
    }
    for (long spin = 0; reaped < 3 && spin < 100000000; ++spin) reaped += c.reap_sends();
    CHECK(reaped == 3);
    CHECK(c.reap_sends() == 0);
    c.wait_sends();  // nothing left: returns at once
  }
  // An exchange (the pipeline's group): send to the next rank and receive from the previous one at once, which
  // completes under the rendezvous stand-in too; its send counts as one for reap_sends.
  g_ctx = "exchange";
  {
    const long n = std::min(200000L, g_max_n);
    std::vector<double> out(n), in(n, -1);
    for (long i = 0; i < n; ++i) out[i] = val(r, i, 40);
    c.exchange({{true, out.data(), n, Dtype::f64, next, 41}, {false, in.data(), n, Dtype::f64, prev, 41}});
    for (long i = 0; i < n; ++i) CHECK(in[i] == val(prev, i, 40));
    int reaped = 0;
    for (long spin = 0; reaped < 1 && spin < 100000000; ++spin) reaped += c.reap_sends();
    CHECK(reaped == 1);
    c.barrier();  // (no rank's next check sends before the others received)
  }
  bool threw = false;
  try {
    c.send(&a, 1, Dtype::i32, P, 0);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}


void check_comm(Comm& c, int me, const std::vector<int>& order) {
  for (long n : {0L, 1L, 3L, 4L, 5L, 37L, 1000L, 4099L}) {
    if (n > g_max_n) continue;
    check_sums<double>(c, me, order, n, 1);
    check_sums<float>(c, me, order, n, 2);
    check_sums<int32_t>(c, me, order, n, 3);
    check_moves<double>(c, me, order, n);
    check_moves<float>(c, me, order, n);
    check_moves<int32_t>(c, me, order, n);
    check_u8(c, n);
  }
  check_ring(c);
  c.barrier();
}

void run_all(Comm& w) {
  const int P = w.size(), me = w.rank();
  std::vector<int> world_order(P);
  for (int r = 0; r < P; ++r) world_order[r] = r;
  check_comm(w, me, world_order);

  // The test is sensitive to order: for 3+ ranks, the reverse-order sum differs somewhere.
  if (P >= 3) {
    g_ctx = "order sensitivity";
    int differ = 0;
    for (long i = 0; i < 1000; ++i) {
      double fwd = val(0, i, 1), rev = val(P - 1, i, 1);
      for (int r = 1; r < P; ++r) fwd += val(r, i, 1);
      for (int r = P - 2; r >= 0; --r) rev += val(r, i, 1);
      differ += fwd != rev;
    }
    CHECK(differ > 0);
  }

  // 2 x 2 (groups of consecutive ranks), and one reversed group order (key = -rank).
  g_ctx = "split";
  auto groups = w.split(me / 2, me % 2);
  CHECK(groups != nullptr);
  if (groups) {
    CHECK(groups->size() == (P % 2 == 1 && me == P - 1 ? 1 : std::min(2, P)));
    CHECK(groups->rank() == me % 2);
    std::vector<int> order;
    for (int r = (me / 2) * 2; r < std::min(P, (me / 2) * 2 + 2); ++r) order.push_back(r);
    check_comm(*groups, me, order);
  }
  auto rev = w.split(me % 2, -me);
  CHECK(rev != nullptr);
  if (rev) {
    std::vector<int> order;
    for (int r = P - 1; r >= 0; --r)
      if (r % 2 == me % 2) order.push_back(r);
    CHECK(rev->size() == static_cast<int>(order.size()));
    CHECK(order[rev->rank()] == me);
    check_comm(*rev, me, order);
  }
  auto some = w.split(me == P - 1 ? -1 : 0, 0);  // the last rank joins no group
  CHECK((some == nullptr) == (me == P - 1));
  if (some) CHECK(some->size() == P - 1);
  w.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  int expect_size = 4;
  bool abort_mode = false, deadlock_mode = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--abort") abort_mode = true;
    else if (a == "--deadlock") deadlock_mode = true;
    else if (a == "--expect-size" && i + 1 < argc) expect_size = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--expect-size N] [--abort] [--deadlock]\n", argv[0]);
      return 2;
    }
  }
  Comm& w = world();
  g_rank = w.rank();
  if (abort_mode) {
    if (w.rank() == 1) w.abort(3, "boom");
    w.barrier();  // the others wait here until the job is torn down
    std::fprintf(stderr, "rank %d: passed the barrier after an abort\n", w.rank());
    finalize_world();
    return 0;  // a zero exit means the abort did not propagate: check_abort.cmake fails
  }
  if (deadlock_mode) {
    double out = 1, in = 0;
    const int peer = 1 - w.rank();
    if (w.rank() < 2) {
      w.exchange({{true, &out, 1, Dtype::f64, peer, 5}});  // both send first: each waits for the other's receive
      w.exchange({{false, &in, 1, Dtype::f64, peer, 5}});
    }
    std::fprintf(stderr, "rank %d: the exchanges completed\n", w.rank());
    finalize_world();
    return 0;  // a zero exit: the stand-in did not see the deadlock
  }
  g_ctx = "world";
  CHECK(w.size() == expect_size);
  if (w.size() == expect_size) {
    run_all(w);
    if (w.size() > 1) {  // the chunked paths (MPI only) must give the same results
      g_max_n = 1000;
      tp::exec::detail::set_mpi_chunk_elems(7);  // uneven chunks; for reduce_scatter 7 / 4 -> 1 element
      run_all(w);
      g_max_n = 37;
      tp::exec::detail::set_mpi_chunk_elems(1);
      run_all(w);
      tp::exec::detail::set_mpi_chunk_elems(1L << 26);
    }
  }
  int32_t fails = g_failures;
  w.all_reduce_sum(&fails, 1, Dtype::i32);
  if (w.rank() == 0) std::printf("test_comm_mpi: %d rank(s), %d failure(s)\n", w.size(), fails);
  finalize_world();
  return fails == 0 ? 0 : 1;
}
