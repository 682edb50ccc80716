// exchange: the pipeline's grouped point-to-point exchanges, their rendezvous run and check (exchange.hpp).
// The run keeps every operation in one flat table (its stage, group and counterpart), so moving a receive to an
// earlier group is one field and a list edit, and a repair never re-matches the pairs.
#include "schedule/exchange.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

namespace tp {

std::string describe(const P2pStep& s) {
  std::string d = s.send ? "send " : "recv ";
  d += s.pass == Pass::fwd ? "f " : "b ";
  d += chunk_op_name(s.model_chunk, s.pass, s.microbatch);
  d += s.send ? " to s" : " from s";
  d += std::to_string(s.peer);
  return d;
}

std::vector<Exchange> item_exchanges(const StageLayout& lay, const std::vector<WorkItem>& order, int stage) {
  const int nchunks = lay.num_model_chunks();
  std::vector<Exchange> ex(order.size() + 1);
  for (size_t k = 0; k < order.size(); ++k) {
    const WorkItem& w = order[k];
    const int g = lay.model_chunk(stage, w.chunk);
    const bool fwd = w.pass == Pass::fwd;
    // The input: forward from chunk g - 1, backward from g + 1; none at the ends (embedding, head).
    const int from = fwd ? g - 1 : g + 1;
    if (from >= 0 && from < nchunks && lay.stage_of(from) != stage)
      ex[k].push_back({false, lay.stage_of(from), w.pass, g, w.microbatch});
    // The output: forward to chunk g + 1, backward to g - 1 (received as that chunk's input), in the next group.
    const int to = fwd ? g + 1 : g - 1;
    if (to >= 0 && to < nchunks && lay.stage_of(to) != stage)
      ex[k + 1].insert(ex[k + 1].begin(), P2pStep{true, lay.stage_of(to), w.pass, to, w.microbatch});
  }
  return ex;
}

bool exchanges_block_compute(const Plan& p) {
  return p.pp > 1 && p.grad_accumulation == GradAccumulation::standard &&
         (p.schedule == Schedule::gpipe || p.schedule == Schedule::one_f_one_b);
}

namespace {

// Every stage's exchanges as one table of operations under a rendezvous run.
struct Run {
  struct Op {
    P2pStep s;
    int stage = 0, group = 0, peer_op = -1;
    bool done = false;
  };
  std::vector<Op> ops;
  std::vector<std::vector<std::vector<int>>> groups;  // [stage][group] -> op ids, in issue order
  std::vector<int> at;                                // each stage's current group

  std::string load(const std::vector<std::vector<Exchange>>& st);
  bool step();               // one sweep: operations met, stages advanced; true if anything moved
  bool repair();             // a blocked send's receive posted in the receiver's current group; true if any
  std::string stuck() const;
  bool finished() const {
    for (size_t s = 0; s < at.size(); ++s)
      if (at[s] < (int)groups[s].size()) return false;
    return true;
  }
  std::vector<std::vector<Exchange>> result() const;
};

// The table, and every operation's counterpart by the pairs' issue order; "" or the first mismatch.
std::string Run::load(const std::vector<std::vector<Exchange>>& st) {
  const int n = (int)st.size();
  groups.assign(n, {});
  at.assign(n, 0);
  std::map<std::pair<int, int>, std::vector<int>> sends, recvs;  // (from, to) -> op ids in issue order
  for (int s = 0; s < n; ++s) {
    groups[s].resize(st[s].size());
    for (int k = 0; k < (int)st[s].size(); ++k)
      for (const P2pStep& x : st[s][k]) {
        if (x.peer < 0 || x.peer >= n || x.peer == s) return "stage " + std::to_string(s) + ": " + describe(x) + " names no other stage";
        const int id = (int)ops.size();
        ops.push_back({x, s, k});
        groups[s][k].push_back(id);
        (x.send ? sends[{s, x.peer}] : recvs[{x.peer, s}]).push_back(id);
      }
  }
  for (auto& [pair, rs] : recvs)
    if (!sends.count(pair)) sends[pair];  // (a receive with no send at all: reported below)
  for (auto& [pair, ss] : sends) {
    const std::vector<int>& rs = recvs[pair];
    for (size_t i = 0; i < std::max(ss.size(), rs.size()); ++i) {
      if (i >= ss.size() || i >= rs.size()) {
        const Op& a = ops[i < ss.size() ? ss[i] : rs[i]];
        return "stage " + std::to_string(a.stage) + ": " + describe(a.s) + " has no counterpart";
      }
      Op &x = ops[ss[i]], &y = ops[rs[i]];
      if (x.s.pass != y.s.pass || x.s.model_chunk != y.s.model_chunk || x.s.microbatch != y.s.microbatch)
        return "stage " + std::to_string(pair.first) + "'s " + describe(x.s) + " meets stage " +
               std::to_string(pair.second) + "'s " + describe(y.s) +
               " (pairs match in issue order: the data would land in the wrong item)";
      x.peer_op = rs[i], y.peer_op = ss[i];
    }
  }
  return "";
}

bool Run::step() {
  bool moved = false;
  for (size_t s = 0; s < at.size(); ++s) {
    if (at[s] >= (int)groups[s].size()) continue;
    for (int id : groups[s][at[s]]) {
      Op &o = ops[id], &q = ops[o.peer_op];
      if (!o.done && at[q.stage] == q.group) o.done = q.done = moved = true;
    }
  }
  for (size_t s = 0; s < at.size(); ++s)
    while (at[s] < (int)groups[s].size() &&
           std::all_of(groups[s][at[s]].begin(), groups[s][at[s]].end(), [&](int id) { return ops[id].done; })) {
      ++at[s];
      moved = true;
    }
  return moved;
}

// A send blocked in its stage's current group whose receive waits in a later group of the receiver: that receive
// joins the receiver's current group (appended: the receiver's earlier receives from this sender are all matched to
// earlier sends, so issue order holds). Moving a receive earlier never breaks a data dependence (it only needs its
// buffer sooner).
bool Run::repair() {
  bool any = false;
  for (size_t s = 0; s < at.size(); ++s) {
    if (at[s] >= (int)groups[s].size()) continue;
    for (int id : groups[s][at[s]]) {
      const Op& o = ops[id];
      Op& q = ops[o.peer_op];
      if (o.done || !o.s.send || q.group <= at[q.stage]) continue;
      std::vector<int>& from = groups[q.stage][q.group];
      from.erase(std::find(from.begin(), from.end(), o.peer_op));
      q.group = at[q.stage];
      groups[q.stage][q.group].push_back(o.peer_op);
      any = true;
    }
  }
  return any;
}

std::string Run::stuck() const {
  std::string out;
  for (size_t s = 0; s < at.size(); ++s) {
    if (at[s] >= (int)groups[s].size()) continue;
    if (!out.empty()) out += "; ";
    out += "stage " + std::to_string(s) + " in exchange " + std::to_string(at[s]) + " waits to";
    for (int id : groups[s][at[s]])
      if (!ops[id].done) out.append(" ").append(describe(ops[id].s));
  }
  return out.empty() ? out : "deadlock: " + out;
}

std::vector<std::vector<Exchange>> Run::result() const {
  std::vector<std::vector<Exchange>> st(groups.size());
  for (size_t s = 0; s < groups.size(); ++s)
    for (const std::vector<int>& g : groups[s]) {
      st[s].emplace_back();
      for (int id : g) st[s].back().push_back(ops[id].s);
    }
  return st;
}

}  // namespace

std::string rendezvous_check(const std::vector<std::vector<Exchange>>& st) {
  Run r;
  if (std::string bad = r.load(st); !bad.empty()) return bad;
  while (r.step()) {
  }
  return r.finished() ? "" : r.stuck();
}

std::vector<std::vector<Exchange>> plan_exchanges(const Plan& p, long long layers) {
  const StageLayout lay = stage_layout(p, layers);
  std::vector<std::vector<Exchange>> st;
  for (int s = 0; s < p.pp; ++s) st.push_back(item_exchanges(lay, plan_order(p, layers, s), s));
  Run r;
  if (std::string bad = r.load(st); !bad.empty()) throw std::logic_error("pipeline exchanges: " + bad);
  for (;;) {
    while (r.step()) {
    }
    if (r.finished()) return r.result();
    if (!r.repair()) throw std::logic_error("pipeline exchanges: " + r.stuck());
  }
}

}  // namespace tp
