// engine: event loop. See engine.hpp. Complexity: O((tasks + flows) log events) plus the flow re-solves,
// which are confined to connected components of flows sharing links.
#include "engine.hpp"

#include <functional>
#include <queue>
#include <tuple>

namespace tp {

namespace {

struct Event {
  double t;
  long long seq;
  int task;  // compute task ending
  int version = 0;  // the task's end as scheduled then; an older version is stale (its rate changed since)
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct CollState {
  int arrived = 0;
  int phase = -1;
  int flows_left = 0;
};

}  // namespace

static void csr(int n, const std::vector<std::pair<int, int>>& edges, bool by_second, std::vector<int>& off,
                std::vector<int>& ids) {
  off.assign(n + 1, 0);
  for (auto& e : edges) off[(by_second ? e.second : e.first) + 1]++;
  for (int i = 0; i < n; ++i) off[i + 1] += off[i];
  ids.assign(edges.size(), 0);
  std::vector<int> fill(off.begin(), off.end() - 1);
  for (auto& e : edges) {
    if (by_second) ids[fill[e.second]++] = e.first;
    else ids[fill[e.first]++] = e.second;
  }
}

void engine_finalize(EngineInput& in) {
  int n = (int)in.tasks.size();
  csr(n, in.edges, true, in.dep_offset, in.dep_ids);
  csr(n, in.edges, false, in.out_offset, in.out_ids);
}

EngineOutput engine_run(const EngineInput& in) {
  const int T = (int)in.tasks.size();
  EngineOutput out;
  out.start_s.assign(T, -1);
  out.end_s.assign(T, -1);
  out.transfer_s.assign(T, -1);

  // Everything the event loop reads per task, packed together (one cache line serves two tasks).
  struct Hot {
    double duration_s;
    int lane, pending, coll, out_begin, out_end;
  };
  std::vector<Hot> hot(T);
  for (int i = 0; i < T; ++i)
    hot[i] = Hot{in.tasks[i].duration_s, in.tasks[i].rank * in.lanes + in.tasks[i].lane,
                 in.dep_offset[i + 1] - in.dep_offset[i], in.tasks[i].coll, in.out_offset[i], in.out_offset[i + 1]};
  // Member tasks of each collective (CSR), in task order.
  const int C = (int)in.colls.size();
  std::vector<int> mem_off(C + 1, 0), mem_ids;
  for (int i = 0; i < T; ++i)
    if (in.tasks[i].coll >= 0) mem_off[in.tasks[i].coll + 1]++;
  for (int c = 0; c < C; ++c) mem_off[c + 1] += mem_off[c];
  mem_ids.resize(mem_off[C]);
  {
    std::vector<int> fill(mem_off.begin(), mem_off.end() - 1);
    for (int i = 0; i < T; ++i)
      if (in.tasks[i].coll >= 0) mem_ids[fill[in.tasks[i].coll]++] = i;
  }

  const int L = in.ranks * in.lanes;
  std::vector<size_t> head(L, 0);
  std::vector<char> busy(L, 0);
  std::vector<CollState> cs(C);
  FlowNet net(in.link_capacity_bytes_per_s);
  std::vector<int> flow_coll;  // flow id -> collective
  flow_coll.reserve(C);

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> pq;
  long long seq = 0;
  double now = 0;
  int done = 0;

  std::vector<int> ready_lanes;  // lanes to try starting, processed FIFO

  // Interference state: collectives in transfer per rank, and each running compute task's work left (seconds at
  // full speed), the time its current rate began, and the version of its scheduled end.
  const bool interfere = in.compute_slowdown > 0 && !in.lane_slowed.empty();
  std::vector<int> active_comm(interfere ? in.ranks : 0, 0);
  std::vector<double> work_left(interfere ? T : 0, 0), seg_start(interfere ? T : 0, 0);
  std::vector<int> version(interfere ? T : 0, 0);
  std::vector<int> running(interfere ? L : 0, -1);  // slowed lane -> its running compute task
  const double slow_rate = 1.0 / (1.0 + in.compute_slowdown);
  auto lane_slowed = [&](int ln) { return interfere && in.lane_slowed[ln % in.lanes]; };
  auto interferes = [&](int ln) { return in.lane_interferes.empty() || in.lane_interferes[ln % in.lanes]; };
  // Rank r's collectives in transfer went from `was` to active_comm[r]: re-time its running slowed tasks.
  auto comm_changed = [&](int r, int was, double t) {
    const bool before = was > 0, after = active_comm[r] > 0;
    if (before == after) return;
    for (int ln = r * in.lanes; ln < (r + 1) * in.lanes; ++ln) {
      const int task = running[ln];
      if (task < 0) continue;
      work_left[task] -= (t - seg_start[task]) * (before ? slow_rate : 1.0);
      seg_start[task] = t;
      const double rate = after ? slow_rate : 1.0;
      pq.push(Event{t + std::max(0.0, work_left[task]) / rate, seq++, task, ++version[task]});
    }
  };

  auto finish_task = [&](int task, double t) {
    out.end_s[task] = t;
    ++done;
    const Hot& h = hot[task];
    if (interfere) {
      if (h.coll >= 0 && out.transfer_s[task] >= 0 && interferes(h.lane)) {
        const int r = h.lane / in.lanes;
        comm_changed(r, active_comm[r]--, t);
      }
      if (running[h.lane] == task) running[h.lane] = -1;
    }
    busy[h.lane] = 0;
    head[h.lane]++;
    ready_lanes.push_back(h.lane);
    for (int k = h.out_begin; k < h.out_end; ++k) {
      Hot& d = hot[in.out_ids[k]];
      if (--d.pending == 0) ready_lanes.push_back(d.lane);
    }
  };

  auto start_phase = [&](int c, double t) {
    CollState& st = cs[c];
    const CollShape& shape = in.shapes[in.colls[c].shape];
    while (true) {
      st.phase++;
      if (st.phase >= (int)shape.size()) {
        for (int k = mem_off[c]; k < mem_off[c + 1]; ++k) finish_task(mem_ids[k], t);
        return;
      }
      const auto& flows = shape[st.phase];
      if (flows.empty()) continue;
      st.flows_left = (int)flows.size();
      for (const FlowSpec& f : flows) {
        int id = net.add_ref(&f, t);
        if ((int)flow_coll.size() <= id) flow_coll.resize(id + 1, -1);
        flow_coll[id] = c;
      }
      return;
    }
  };

  auto try_lane = [&](int ln, double t) {
    if (busy[ln]) return;
    const auto& order = in.lane_order[ln];
    if (head[ln] >= order.size()) return;
    int task = order[head[ln]];
    const Hot& h = hot[task];
    if (h.pending != 0) return;
    busy[ln] = 1;
    out.start_s[task] = t;
    if (h.coll < 0) {
      if (lane_slowed(ln)) {
        running[ln] = task;
        work_left[task] = h.duration_s;
        seg_start[task] = t;
        const double rate = active_comm[ln / in.lanes] > 0 ? slow_rate : 1.0;
        pq.push(Event{t + h.duration_s / rate, seq++, task, ++version[task]});
        return;
      }
      pq.push(Event{t + h.duration_s, seq++, task});
      return;
    }
    CollState& st = cs[h.coll];
    if (++st.arrived == in.colls[h.coll].members) {
      for (int k = mem_off[h.coll]; k < mem_off[h.coll + 1]; ++k) {
        out.transfer_s[mem_ids[k]] = t;
        if (interfere && interferes(hot[mem_ids[k]].lane)) {
          const int r = hot[mem_ids[k]].lane / in.lanes;
          comm_changed(r, active_comm[r]++, t);
        }
      }
      start_phase(h.coll, t);
    }
  };

  auto drain = [&](double t) {
    for (size_t i = 0; i < ready_lanes.size(); ++i) try_lane(ready_lanes[i], t);
    ready_lanes.clear();
  };

  for (int ln = 0; ln < L; ++ln) ready_lanes.push_back(ln);
  drain(0);

  while (true) {
    while (interfere && !pq.empty() && pq.top().version != 0 && pq.top().version != version[pq.top().task]) pq.pop();  // re-timed
    // Events at the current instant need no re-solve first (a flow finishing now is final); batch them, then
    // re-solve the flow rates once before time advances.
    if (!pq.empty() && pq.top().t <= now) {
      Event ev = pq.top();
      pq.pop();
      ++out.events;
      finish_task(ev.task, now);
      drain(now);
      continue;
    }
    auto [ft0, fid0] = net.next_completion();
    if (fid0 >= 0 && ft0 <= now) {
      ++out.events;
      net.complete_deferred(fid0, now);
      int c = flow_coll[fid0];
      if (--cs[c].flows_left == 0) start_phase(c, now);
      drain(now);
      continue;
    }
    net.flush(now);
    auto [ft, fid] = net.next_completion();
    bool have_pq = !pq.empty();
    if (!have_pq && fid < 0) break;
    if (have_pq && (fid < 0 || pq.top().t <= ft)) {
      now = pq.top().t;
    } else {
      now = ft;
    }
  }
  out.makespan_s = now;
  out.deadlock = done != T;
  out.link_bytes = net.link_bytes();
  return out;
}

}  // namespace tp
