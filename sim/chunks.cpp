// chunks: PatrickStar's chunk manager for one data-parallel rank (layout, warm-up trace, Belady eviction,
// hybrid Adam). Conventions and invariants are documented in chunks.hpp. Everything here is deterministic:
// loops run in chunk-id order and ties go to the lowest chunk id.
#include "sim/chunks.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "sim/chunk_policy.hpp"

namespace tp {
namespace {

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("simulate_chunks: ") + what);
}

void add_chunk(ChunkLayout& L, double capacity, bool dummy) {
  L.chunk_elements.push_back(capacity);
  L.used_elements.push_back(0);
  L.is_dummy.push_back(dummy ? 1 : 0);
  L.parts_of_chunk.emplace_back();
}

}  // namespace

ChunkLayout layout_chunks(const ChunkSimInput& in) {
  check(in.tensor_elements.size() == in.tensor_part.size(), "tensor_elements and tensor_part sizes differ");
  check(in.chunk_elements > 0, "chunk_elements must be positive");
  check(in.world >= 1 && in.rank >= 0 && in.rank < in.world, "need world >= 1 and 0 <= rank < world");
  ChunkLayout L;
  const double cap = static_cast<double>(in.chunk_elements);
  bool open = false;  // the last chunk can take more tensors
  for (size_t t = 0; t < in.tensor_elements.size(); ++t) {
    const double e = in.tensor_elements[t];
    const int part = in.tensor_part[t];
    check(e >= 0, "negative tensor size");
    check(part >= 0 && part < in.parts, "tensor_part out of range");
    if (e > cap) {  // a chunk of its own, sized to the tensor
      add_chunk(L, e, false);
      open = false;
    } else if (!open || L.used_elements.back() + e > cap) {
      add_chunk(L, cap, false);
      open = true;
    }
    const int c = static_cast<int>(L.chunk_elements.size()) - 1;
    L.used_elements[c] += e;
    L.chunk_of_tensor.push_back(c);
    auto& ps = L.parts_of_chunk[c];
    if (std::find(ps.begin(), ps.end(), part) == ps.end()) ps.push_back(part);
  }
  for (auto& ps : L.parts_of_chunk) std::sort(ps.begin(), ps.end());
  while (L.chunk_elements.size() % static_cast<size_t>(in.world) != 0) add_chunk(L, cap, true);
  return L;
}

namespace {

// The layout seen from this rank: which chunks are local, a chunk's fp16 bytes.
struct RankChunks {
  const ChunkSimInput& in;
  const ChunkLayout& L;
  int n = 0, W = 1;
  bool local(int c) const { return c % W == in.rank && !L.is_dummy[c]; }
  double fp16(int c) const { return L.chunk_elements[c] * in.param_bytes; }
};

// Per moment: the local chunks it needs, the bytes of the other ranks' chunks it gathers (transient payloads),
// and per local chunk the moments that access it (the warm-up trace). The ADAM moment needs none.
struct MomentNeeds {
  std::vector<std::vector<int>> needed;
  std::vector<double> transient;
  std::vector<std::vector<int>> trace;
};

MomentNeeds moment_needs(const RankChunks& v) {
  const ChunkSimInput& in = v.in;
  const int T = static_cast<int>(in.moments.size()), W = v.W;
  std::vector<std::vector<int>> groups_of_part(in.parts);  // the chunk groups each part touches
  for (int c = 0; c < v.n; ++c)
    for (int p : v.L.parts_of_chunk[c]) {
      auto& g = groups_of_part[p];
      if (g.empty() || g.back() != c / W) g.push_back(c / W);
    }
  MomentNeeds m{std::vector<std::vector<int>>(T), std::vector<double>(T, 0.0), std::vector<std::vector<int>>(v.n)};
  for (int k = 0; k < T; ++k) {
    if (in.moment_is_adam[k]) continue;
    std::vector<int> groups;
    for (int p : in.moments[k]) {
      check(p >= 0 && p < in.parts, "moment part out of range");
      groups.insert(groups.end(), groups_of_part[p].begin(), groups_of_part[p].end());
    }
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    for (int g : groups)
      for (int c = g * W; c < (g + 1) * W; ++c) {
        if (v.local(c)) {
          m.needed[k].push_back(c);
          m.trace[c].push_back(k);
        } else {
          m.transient[k] += v.fp16(c);
        }
      }
  }
  return m;
}

// fits: the COMPUTE chunks of a moment alone must fit next to its non-model memory.
void check_fits(const RankChunks& v, const MomentNeeds& m, double overall, ChunkSimResult& r) {
  for (int k = 0; k < static_cast<int>(m.needed.size()) && r.fits; ++k) {
    double compute = m.transient[k];
    for (int c : m.needed[k]) compute += v.fp16(c);
    const double avail = overall - v.in.nonmodel_bytes[k];
    if (compute > avail) {
      r.fits = false;
      r.unfit_moment = k;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "moment %d: COMPUTE chunks (%.4g GB) exceed overall GPU memory - non-model (%.4g GB) by "
                    "%.4g GB",
                    k, compute / 1e9, avail / 1e9, (compute - avail) / 1e9);
      r.why = buf;
    }
  }
}

// Hybrid Adam: the first local chunks whose optimizer state fits in the margin go to the GPU (per chunk: 1).
std::vector<char> place_hybrid_adam(const RankChunks& v, const std::vector<int>& local, double overall,
                                    ChunkSimResult& r) {
  double max_nonmodel = 0;
  for (double b : v.in.nonmodel_bytes) max_nonmodel = std::max(max_nonmodel, b);
  std::vector<double> caps;
  for (int c : local) caps.push_back(v.L.chunk_elements[c]);
  const int k = hybrid_adam_chunks(caps, v.in.os_bytes, overall, max_nonmodel, r.local_fp16_bytes,
                                   v.in.hybrid_adam_margin);
  std::vector<char> os_gpu(v.n, 0);
  for (int i = 0; i < k; ++i) {
    os_gpu[local[i]] = 1;
    r.gpu_os_bytes += caps[i] * v.in.os_bytes;
    ++r.os_chunks_on_gpu;
  }
  return os_gpu;
}

// The chunk residency over the steps: per moment, evict (warm-up: the lowest id; then Belady: the farthest next
// use) until the moment's chunks fit its budget, then load them; `record` fills the reported step's figures.
struct Residency {
  const RankChunks& v;
  const MomentNeeds& m;
  const std::vector<int>& local;
  const std::vector<char>& os_gpu;
  ChunkSimResult& r;
  std::vector<char> on_gpu;  // local chunks only; all start on the CPU
  double resident = 0;       // bytes of local chunks on the GPU

  void evict_for(int k, double incoming, double budget, bool warmup, bool record, const std::vector<char>& compute) {
    const double spill = std::max(0.0, m.transient[k] - r.comm_buffer_bytes);
    const int T = static_cast<int>(m.needed.size());
    while (resident + incoming + spill > budget) {
      const int victim = chunk_victim(
          static_cast<int>(local.size()), [&](int i) { return local[i]; },
          [&](int c) { return on_gpu[c] && !compute[c]; }, warmup, [&](int c) { return chunk_next_use(m.trace[c], k, T); });
      if (victim < 0) break;
      on_gpu[victim] = 0;
      resident -= v.fp16(victim);
      if (record) {
        r.moves.push_back({k, victim, false, v.fp16(victim)});
        r.d2h_bytes[k] += v.fp16(victim);
      }
    }
  }
  // The next runs' chunks on the copy stream while moment k computes (chunk_policy.hpp chunk_prefetch).
  void prefetch(int k, double budget, bool record, const std::vector<char>& compute) {
    const int T = static_cast<int>(m.needed.size()), depth = v.in.prefetch_runs;
    const std::vector<int> wanted = chunk_prefetch_wanted(
        k, depth, T - 1, [&](int j) -> const std::vector<int>& { return m.needed[j]; }, [&](int c) { return on_gpu[c] != 0; });
    if (wanted.empty()) return;
    auto protect = [&](int c) {
      if (compute[c]) return true;
      for (int j = k + 1; j <= std::min(k + depth, T - 1); ++j)
        if (std::binary_search(m.needed[j].begin(), m.needed[j].end(), c)) return true;
      return false;
    };
    const double spill = std::max(0.0, m.transient[k] - r.comm_buffer_bytes);
    for (const PrefetchStep& st : chunk_prefetch(
             wanted, static_cast<int>(local.size()), [&](int i) { return local[i]; }, [&](int c) { return on_gpu[c] != 0; },
             protect, [&](int c) { return v.fp16(c); }, [&](int c) { return chunk_next_use(m.trace[c], k, T); }, budget,
             spill, resident)) {
      on_gpu[st.chunk] = st.load ? 1 : 0;
      if (!record) continue;
      r.moves.push_back({k, st.chunk, st.load, v.fp16(st.chunk), true});
      (st.load ? r.prefetch_h2d_bytes : r.prefetch_d2h_bytes)[k] += v.fp16(st.chunk);
    }
  }
  void record_adam() {  // the ADAM moment: grads to the OS device, updated params back
    r.adam_chunks.clear();
    r.adam_d2h_bytes = r.adam_h2d_bytes = 0;
    for (int c : local) {
      r.adam_chunks.push_back({c, v.L.used_elements[c], os_gpu[c] != 0, on_gpu[c] != 0});
      if (os_gpu[c] != on_gpu[c]) {
        r.adam_d2h_bytes += v.fp16(c);
        r.adam_h2d_bytes += v.fp16(c);
      }
    }
  }
  void step(const std::vector<double>& budget, bool warmup, bool record) {
    const int T = static_cast<int>(m.needed.size());
    if (record) {
      r.h2d_bytes.assign(T, 0.0);
      r.d2h_bytes.assign(T, 0.0);
      r.prefetch_h2d_bytes.assign(T, 0.0);
      r.prefetch_d2h_bytes.assign(T, 0.0);
      r.gpu_chunk_bytes.assign(T, 0.0);
      r.host_bytes = r.local_fp16_bytes - resident;
    }
    std::vector<char> compute(v.n, 0);
    for (int k = 0; k < T; ++k) {
      double incoming = 0;
      for (int c : m.needed[k]) {
        compute[c] = 1;
        if (!on_gpu[c]) incoming += v.fp16(c);
      }
      evict_for(k, incoming, budget[k], warmup, record, compute);
      for (int c : m.needed[k]) {
        if (on_gpu[c]) continue;
        on_gpu[c] = 1;
        resident += v.fp16(c);
        if (record) {
          r.moves.push_back({k, c, true, v.fp16(c)});
          r.h2d_bytes[k] += v.fp16(c);
        }
      }
      if (!warmup && v.in.prefetch_runs > 0 && !v.in.moment_is_adam[k]) prefetch(k, budget[k], record, compute);
      for (int c : m.needed[k]) compute[c] = 0;
      if (!record) continue;
      r.gpu_chunk_bytes[k] = resident + m.transient[k];
      r.peak_gpu_chunk_bytes = std::max(r.peak_gpu_chunk_bytes, r.gpu_chunk_bytes[k]);
      r.host_bytes = std::max(r.host_bytes, r.local_fp16_bytes - resident);
      if (v.in.moment_is_adam[k]) record_adam();
    }
  }
};

}  // namespace

ChunkSimResult simulate_chunks(const ChunkSimInput& in) {
  const ChunkLayout L = layout_chunks(in);
  const int T = static_cast<int>(in.moments.size());
  check(in.moment_is_adam.size() == in.moments.size(), "moment_is_adam size differs from moments");
  check(in.nonmodel_bytes.size() == in.moments.size(), "nonmodel_bytes size differs from moments");
  const RankChunks v{in, L, static_cast<int>(L.chunk_elements.size()), in.world};
  const double E = static_cast<double>(in.chunk_elements);
  const double overall = in.gpu_memory_fraction * in.hbm_bytes;

  ChunkSimResult r;
  r.padded_chunks = v.n;
  std::vector<int> local;
  for (int c = 0; c < v.n; ++c) {
    if (!L.is_dummy[c]) ++r.chunks;
    if (!v.local(c)) continue;
    local.push_back(c);
    r.local_param_elements += L.used_elements[c];
    r.local_fp16_bytes += v.fp16(c);
  }
  r.local_chunks = static_cast<int>(local.size());
  r.comm_buffer_bytes = v.W > 1 ? v.W * E * in.param_bytes : 0.0;

  const MomentNeeds m = moment_needs(v);
  check_fits(v, m, overall, r);
  const std::vector<char> os_gpu = place_hybrid_adam(v, local, overall, r);

  // Budgets of the warm-up and the steady steps.
  std::vector<double> warm(T), steady(T);
  for (int k = 0; k < T; ++k) {
    if (in.moment_is_adam[k]) {
      warm[k] = overall - adam_moment_reserve_bytes(E);
      steady[k] = overall - adam_moment_reserve_bytes(E) - r.gpu_os_bytes;
    } else {
      warm[k] = in.warmup_chunk_fraction * overall;
      const double next = in.nonmodel_bytes[(k + 1) % T];
      steady[k] = std::min(overall - in.nonmodel_bytes[k], overall - next) - r.comm_buffer_bytes - r.gpu_os_bytes;
    }
  }
  r.budget_bytes = steady;

  Residency res{v, m, local, os_gpu, r, std::vector<char>(v.n, 0), 0.0};
  res.step(warm, true, false);     // step 0: warm-up (the access trace is known from the moments)
  res.step(steady, false, false);  // step 1
  res.step(steady, false, true);   // step 2: reported

  for (int c : local) {
    if (os_gpu[c]) {
      r.gpu_adam_elements += L.used_elements[c];
    } else {
      r.cpu_adam_elements += L.used_elements[c];
      r.host_bytes += L.chunk_elements[c] * in.os_bytes;
    }
  }
  if (r.adam_chunks.empty())  // no ADAM moment: report where the chunks are at the end of the step
    for (int c : local) r.adam_chunks.push_back({c, L.used_elements[c], os_gpu[c] != 0, res.on_gpu[c] != 0});
  return r;
}

}  // namespace tp
