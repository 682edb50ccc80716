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
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct CollState {
  int arrived = 0;
  int phase = -1;
  int flows_left = 0;
  std::vector<int> member_tasks;
};

}  // namespace

EngineOutput engine_run(const EngineInput& in) {
  const int T = (int)in.tasks.size();
  EngineOutput out;
  out.start_s.assign(T, -1);
  out.end_s.assign(T, -1);
  out.transfer_s.assign(T, -1);

  std::vector<int> pending(T, 0);
  std::vector<std::vector<int>> dependents(T);
  for (int i = 0; i < T; ++i) {
    pending[i] = (int)in.deps[i].size();
    for (int d : in.deps[i]) dependents[d].push_back(i);
  }
  const int L = in.ranks * in.lanes;
  std::vector<size_t> head(L, 0);
  std::vector<char> busy(L, 0);
  std::vector<CollState> cs(in.colls.size());
  FlowNet net(in.link_capacity_bytes_per_s);
  std::vector<int> flow_coll;  // flow id -> collective

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> pq;
  long long seq = 0;
  double now = 0;
  int done = 0;

  std::vector<int> ready_lanes;  // lanes to try starting, processed FIFO
  auto lane_of = [&](int task) { return in.tasks[task].rank * in.lanes + in.tasks[task].lane; };

  auto finish_task = [&](int task, double t) {
    out.end_s[task] = t;
    ++done;
    int ln = lane_of(task);
    busy[ln] = 0;
    head[ln]++;
    ready_lanes.push_back(ln);
    for (int d : dependents[task])
      if (--pending[d] == 0) ready_lanes.push_back(lane_of(d));
  };

  std::function<void(int, double)> start_phase = [&](int c, double t) {
    CollState& st = cs[c];
    const EngineColl& ec = in.colls[c];
    while (true) {
      st.phase++;
      if (st.phase >= (int)ec.phases.size()) {
        for (int m : st.member_tasks) finish_task(m, t);
        return;
      }
      const auto& flows = ec.phases[st.phase];
      if (flows.empty()) continue;
      st.flows_left = (int)flows.size();
      for (const FlowSpec& f : flows) {
        int id = net.add(f, t);
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
    if (pending[task] != 0) return;
    busy[ln] = 1;
    out.start_s[task] = t;
    const EngineTask& et = in.tasks[task];
    if (et.coll < 0) {
      pq.push(Event{t + et.duration_s, seq++, task});
      return;
    }
    CollState& st = cs[et.coll];
    st.member_tasks.push_back(task);
    if (++st.arrived == in.colls[et.coll].members) {
      for (int m : st.member_tasks) out.transfer_s[m] = t;
      start_phase(et.coll, t);
    }
  };

  auto drain = [&](double t) {
    for (size_t i = 0; i < ready_lanes.size(); ++i) try_lane(ready_lanes[i], t);
    ready_lanes.clear();
  };

  for (int ln = 0; ln < L; ++ln) ready_lanes.push_back(ln);
  drain(0);

  while (true) {
    auto [ft, fid] = net.next_completion();
    bool have_pq = !pq.empty();
    if (!have_pq && fid < 0) break;
    ++out.events;
    if (have_pq && (fid < 0 || pq.top().t <= ft)) {
      Event ev = pq.top();
      pq.pop();
      now = ev.t;
      finish_task(ev.task, now);
    } else {
      now = ft;
      net.complete(fid, now);
      int c = flow_coll[fid];
      if (--cs[c].flows_left == 0) start_phase(c, now);
    }
    drain(now);
  }
  out.makespan_s = now;
  out.deadlock = done != T;
  out.link_bytes = net.link_bytes();
  return out;
}

}  // namespace tp
