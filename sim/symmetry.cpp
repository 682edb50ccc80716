// symmetry: loads of representative flows' copies. See symmetry.hpp. Both paths enumerate copies by their
// translation (dd, dk) in dp and tp; the fast path only visits the copies with an endpoint on a node that holds
// a link of R — every other copy crosses no link of R (node links belong to their node, and the fabric is
// ignored there), so the counts on R are identical.
#include "symmetry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace tp {

namespace {

// The copy (src, dst) of representative flow `f` under translation (dd, dk).
std::pair<int, int> copy_at(const Plan& p, const RepFlow& f, const std::map<int, int>& phase_dst, int dd, int dk) {
  RankCoord a = rank_coord(p, f.src), b = rank_coord(p, f.dst);
  int s2 = rank_global(p, (a.tp + dk) % p.tp, (a.dp + dd) % p.data_ranks(), a.stage);
  if (f.group_spans_dp) {
    // The DP group holds its dp translates: their flow in this phase (ring order need not commute with the
    // shift), moved to the dk-th TP translate of the group. An expert-data-parallel group (dp ranks with one
    // residue mod ep) holds only the translates by multiples of ep: the rest is that flow shifted by
    // j = dd mod ep into the group of the next residues.
    auto it = phase_dst.find(rank_global(p, a.tp, (a.dp + dd) % p.data_ranks(), a.stage));
    int j = 0;
    if (it == phase_dst.end()) {
      j = dd % p.ep;
      it = phase_dst.find(rank_global(p, a.tp, (a.dp + dd - j) % p.data_ranks(), a.stage));
      if (it == phase_dst.end()) throw std::logic_error("symmetry: a data-parallel group that is not a dp translate");
    }
    RankCoord dc = rank_coord(p, it->second);
    return {s2, rank_global(p, (dc.tp + dk) % p.tp, (dc.dp + j) % p.data_ranks(), dc.stage)};
  }
  return {s2, rank_global(p, (b.tp + dk) % p.tp, (b.dp + dd) % p.data_ranks(), b.stage)};
}

bool aligned_layout(const Plan& p, const Topology& topo) {
  const int G = topo.gpus_per_node, T = p.tp, B = p.data_ranks() * p.tp;
  return !topo.fabric_blocking && G % T == 0 && (G % B == 0 || B % G == 0) && G % topo.nics_per_node == 0;
}

}  // namespace

CopyLoads copy_loads(const Plan& p, const Topology& topo, const std::vector<RepFlow>& flows, bool exhaustive) {
  CopyLoads out;
  out.loads.resize(flows.size());
  const bool fast = !exhaustive && aligned_layout(p, topo);
  // Per-link scratch, reused across calls (one per thread) and left zeroed after use.
  const size_t NL = topo.links.size();
  thread_local std::vector<char> in_r;
  thread_local std::vector<int> counter;
  if (in_r.size() < NL) { in_r.assign(NL, 0); counter.assign(NL, 0); }
  std::set<int> r_nodes;  // nodes holding a link of R (fast path)
  for (const RepFlow& f : flows) {
    for (int l : f.route) in_r[l] = 1;
    r_nodes.insert(topo.node_of(f.src));
    r_nodes.insert(topo.node_of(f.dst));
  }
  const int gpus = (int)topo.gpu_vertex.size();
  std::vector<int> flat, start, touched;
  std::map<std::pair<int, int>, int> done;  // (src, dst) -> index of an equal flow already computed

  for (size_t fi = 0; fi < flows.size(); ++fi) {
    const RepFlow& f = flows[fi];
    std::map<int, int> phase_dst, phase_src;  // only DP groups need their own ring order
    if (f.phase && f.group_spans_dp)
      for (const FlowReq& fr : *f.phase) { phase_dst[fr.src] = fr.dst; phase_src[fr.dst] = fr.src; }
    // The copies to route.
    std::vector<std::pair<int, int>> copies;
    if (!fast) {
      for (int dd = 0; dd < p.data_ranks(); ++dd)
        for (int dk = 0; dk < p.tp; ++dk) copies.push_back(copy_at(p, f, phase_dst, dd, dk));
    } else {
      RankCoord a = rank_coord(p, f.src), b = rank_coord(p, f.dst);
      std::set<std::pair<int, int>> picked;  // (dd, dk)
      picked.insert({0, 0});
      for (int n : r_nodes) {
        for (int g = n * topo.gpus_per_node; g < std::min(gpus, (n + 1) * topo.gpus_per_node); ++g) {
          RankCoord c = rank_coord(p, g);
          if (c.stage >= p.pp) continue;
          if (c.stage == a.stage)  // copies sent from g
            picked.insert({(c.dp - a.dp + p.data_ranks()) % p.data_ranks(), (c.tp - a.tp + p.tp) % p.tp});
          if (c.stage == b.stage) {  // copies received by g
            int dk = (c.tp - b.tp + p.tp) % p.tp;
            if (f.group_spans_dp) {
              auto it = phase_src.find(rank_global(p, b.tp, c.dp, c.stage));
              int j = 0;
              if (it == phase_src.end()) {  // another expert-data-parallel group: shift back into ours
                j = ((c.dp - a.dp) % p.ep + p.ep) % p.ep;
                it = phase_src.find(rank_global(p, b.tp, (c.dp - j + p.data_ranks()) % p.data_ranks(), c.stage));
              }
              if (it != phase_src.end()) picked.insert({(rank_coord(p, it->second).dp + j - a.dp + p.data_ranks()) % p.data_ranks(), dk});
            } else {
              picked.insert({(c.dp - b.dp + p.data_ranks()) % p.data_ranks(), dk});
            }
          }
        }
      }
      for (auto [dd, dk] : picked) copies.push_back(copy_at(p, f, phase_dst, dd, dk));
    }
    // Route them, count link loads.
    flat.clear();
    start.clear();
    touched.clear();
    for (auto [s2, d2] : copies) {
      start.push_back((int)flat.size());
      topo.route_into(s2, d2, flat);
      for (size_t i = start.back(); i < flat.size(); ++i)
        if (counter[flat[i]]++ == 0) touched.push_back(flat[i]);
    }
    start.push_back((int)flat.size());
    // Exhaustive path: every copy must see what the representative (copy 0 = itself) sees.
    if (!fast && out.symmetric) {
      auto same_as_rep = [&](int c) {
        int i = start[0], j = start[c];
        while (true) {
          while (i < start[1] && !topo.can_bottleneck(flat[i])) ++i;
          while (j < start[c + 1] && !topo.can_bottleneck(flat[j])) ++j;
          bool ei = i >= start[1], ej = j >= start[c + 1];
          if (ei || ej) return ei && ej;
          const LinkInfo &x = topo.links[flat[i]], &y = topo.links[flat[j]];
          if (x.tier != y.tier || x.capacity_bytes_per_s != y.capacity_bytes_per_s || counter[flat[i]] != counter[flat[j]])
            return false;
          ++i, ++j;
        }
      };
      for (size_t c = 1; c + 1 < start.size() && out.symmetric; ++c)
        if (!same_as_rep((int)c)) out.symmetric = false;
    }
    CopyLoad& cl = out.loads[fi];
    for (int l : touched)
      if (in_r[l] && topo.can_bottleneck(l)) cl.links.push_back(l);
    std::sort(cl.links.begin(), cl.links.end());
    for (int l : cl.links) cl.mult.push_back(counter[l]);
    for (int l : touched) counter[l] = 0;
    // Pipeline sends: copies may cross more switches (leaf boundaries) and differ in latency only; the
    // representative carries the slowest copy's latency. Collective phases already use their slowest hop.
    if (f.p2p) {
      auto key = std::make_pair(f.src, f.dst);
      auto it = done.find(key);
      if (it != done.end()) {
        cl.extra_latency_s = out.loads[it->second].extra_latency_s;
      } else {
        double rep = topo.latency_s(f.src, f.dst), worst = rep;
        // In an aligned layout a TP shift stays inside the node and keeps the GPUs' local order, so it cannot
        // change which switches a fat-tree send crosses, nor a send between whole-node stage blocks.
        bool tp_shift_irrelevant = fast && (topo.net == NetTopology::fat_tree || (p.data_ranks() * p.tp) % topo.gpus_per_node == 0);
        for (int dd = 0; dd < p.data_ranks(); ++dd)
          for (int dk = 0; dk < (tp_shift_irrelevant ? 1 : p.tp); ++dk) {
            auto [s2, d2] = copy_at(p, f, phase_dst, dd, dk);
            worst = std::max(worst, topo.latency_s(s2, d2));
          }
        cl.extra_latency_s = worst - rep;
        done[key] = (int)fi;
      }
    }
  }
  for (const RepFlow& f : flows)
    for (int l : f.route) in_r[l] = 0;
  return out;
}

}  // namespace tp
