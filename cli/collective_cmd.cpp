// collective_cmd: `trainplan collective` — one collective over a range of sizes as NCCL runs it on a cluster
// (sim/nccl_model), printed as nccl-tests prints its tables (size, count, time, algbw, busbw) plus the algorithm,
// protocol and channels NCCL picks; --json writes the same rows. Sizes as nccl-tests takes them: bytes with an
// optional K / M / G suffix (powers of 1024), MIN:MAX stepped by --factor.
#include "collective_cmd.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>

#include "args.hpp"
#include "models/catalog.hpp"
#include "models/safe_io.hpp"
#include "sim/nccl_model.hpp"
#include "sim/output.hpp"

namespace tp {

namespace {

// "8", "64K", "1M", "8G" -> bytes; throws Usage naming the option.
double parse_size(const std::string& opt, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  double mult = suffix.empty() ? 1 : suffix == "K" || suffix == "k" ? 1024.0 : suffix == "M" || suffix == "m" ? 1048576.0
              : suffix == "G" || suffix == "g" ? 1073741824.0 : -1;
  if (used == 0 || mult < 0 || !std::isfinite(v) || v < 1 || v * mult > 1e13)
    throw Usage(opt + " takes sizes in bytes from 1 to 8T with an optional K, M or G suffix (powers of 1024), got \"" + text + "\"");
  return std::floor(v * mult);
}

// The cluster: a catalog name, or a JSON file holding a cluster object or a scenario with one.
Cluster load_cluster_arg(const std::string& arg) {
  Issues is;
  Cluster c;
  if (const json* e = catalog_find("clusters", arg)) {
    c = read_cluster(*e, "catalog clusters." + arg, is);
    if (c.name.empty()) c.name = arg;
  } else if (arg.size() > 5 && arg.substr(arg.size() - 5) == ".json") {
    json j = parse_json_file(arg, arg, is);
    if (is.empty()) {
      const bool scenario = j.is_object() && j.contains("cluster");
      const json& v = scenario ? j["cluster"] : j;
      if (v.is_string()) return load_cluster_arg(v.get<std::string>());
      c = read_cluster(v, scenario ? "$.cluster" : "$", is);
      if (c.name.empty()) c.name = arg;
    }
  } else {
    throw Usage("--cluster takes a catalog cluster (" + catalog_names_text("clusters") + ") or a .json file, got \"" + arg +
                "\"" + did_you_mean(arg, catalog_names("clusters")));
  }
  if (!is.empty()) throw InputError(is.messages);
  return c;
}

struct OpName { const char* name; Coll op; };
constexpr OpName kOps[] = {{"all_reduce", Coll::all_reduce}, {"all_gather", Coll::all_gather},
                           {"reduce_scatter", Coll::reduce_scatter}, {"all_to_all", Coll::all_to_all},
                           {"send_recv", Coll::p2p}, {"broadcast", Coll::broadcast}, {"reduce", Coll::reduce}};

int choice_index(const std::string& opt, const std::string& text, const std::vector<std::string>& names) {
  if (text.empty()) return -1;
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return (int)i;
  std::string list;
  for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw Usage(opt + " takes one of " + list + ", got \"" + text + "\"" + did_you_mean(text, names));
}

}  // namespace

int cmd_collective(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--cluster", "--op", "--ranks", "--ranks-per-node", "--bytes", "--factor", "--algo", "--proto", "--json"}, {});
  if (!a.positional.empty()) throw Usage("collective takes no positional argument, got \"" + a.positional[0] + "\"");
  if (a.value("--cluster").empty()) throw Usage("collective needs --cluster NAME|FILE.json");
  if (a.value("--op").empty()) throw Usage("collective needs --op all_reduce|all_gather|reduce_scatter|all_to_all|send_recv");
  if (a.value("--ranks").empty()) throw Usage("collective needs --ranks N");
  std::vector<std::string> op_names;
  for (auto& o : kOps) op_names.push_back(o.name);
  const Coll op = kOps[choice_index("--op", a.value("--op"), op_names)].op;
  const Cluster cl = load_cluster_arg(a.value("--cluster"));
  const int ranks = (int)parse_count("--ranks", a.value("--ranks"), 2, cl.total_gpus());
  const int rpn = a.value("--ranks-per-node").empty() ? std::min(ranks, cl.gpus_per_node)
                                                      : (int)parse_count("--ranks-per-node", a.value("--ranks-per-node"), 1, cl.gpus_per_node);
  if (ranks % rpn != 0)
    throw Usage("--ranks " + std::to_string(ranks) + " is not a multiple of the ranks per node (" + std::to_string(rpn) + ")");
  double lo = 1048576, hi = 8589934592.0;
  if (!a.value("--bytes").empty()) {
    const std::string b = a.value("--bytes");
    const size_t colon = b.find(':');
    lo = parse_size("--bytes", b.substr(0, colon));
    hi = colon == std::string::npos ? lo : parse_size("--bytes", b.substr(colon + 1));
    if (hi < lo) throw Usage("--bytes MIN:MAX needs MIN <= MAX, got \"" + b + "\"");
  }
  double factor = 2;
  if (!a.value("--factor").empty()) {
    factor = (int)parse_count("--factor", a.value("--factor"), 2, 1024);
  }
  const int algo = choice_index("--algo", a.value("--algo"), {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree"});
  const int proto = choice_index("--proto", a.value("--proto"), {"ll", "ll128", "simple"});

  const NcclTuning t = nccl_tuning_for(cl);
  const NcclComm comm = nccl_comm(cl, t, ranks, rpn);
  const double bus = nccl_bus_factor(op, ranks);
  std::string name;
  for (auto& o : kOps) if (o.op == op) name = o.name;
  json rows = json::array();
  std::string text;
  char line[256];
  std::snprintf(line, sizeof line, "# trainplan collective: %s on %d ranks of %s (%d nodes x %d), NCCL %s tuning model\n",
                name.c_str(), ranks, cl.name.c_str(), comm.nodes, rpn, t.version.c_str());
  text += line;
  std::snprintf(line, sizeof line, "# graphs: ring %d x %.1f GB/s, tree %d x %.1f GB/s, nvls %d x %.1f/%.1f GB/s\n",
                comm.ring.channels, comm.ring.bw_intra, comm.tree.channels, comm.tree.bw_intra, comm.nvls.channels,
                comm.nvls.bw_intra, comm.nvls.bw_inter);
  text += line;
  text += "#          size        count   time(us)  algbw(GB/s)  busbw(GB/s)  algorithm      protocol  channels\n";
  for (double s = lo; s <= hi * (1 + 1e-12); s *= factor) {
    const NcclCall c = nccl_call(comm, op, s, algo, proto);
    const double algbw = s / c.time_s / 1e9;
    std::snprintf(line, sizeof line, "%15.0f %12.0f %10.2f %12.2f %12.2f  %-13s  %-8s  %8d\n", s, s / 4, c.time_s * 1e6,
                  algbw, algbw * bus, c.algo.c_str(), c.proto.c_str(), c.channels);
    text += line;
    rows.push_back({{"bytes", s}, {"time_s", c.time_s}, {"algbw_GBps", algbw}, {"busbw_GBps", algbw * bus},
                    {"algorithm", c.algo}, {"protocol", c.proto}, {"channels", c.channels}});
    if (factor <= 1) break;
  }
  json j = {{"cluster", cl.name}, {"op", name}, {"ranks", ranks}, {"ranks_per_node", rpn}, {"nodes", comm.nodes},
            {"nccl_version", t.version}, {"graphs", {{"ring_channels", comm.ring.channels}, {"ring_GBps_per_channel", comm.ring.bw_intra},
            {"nvls_channels", comm.nvls.channels}}}, {"rows", rows}};
  const std::string out = a.value("--json");
  if (out == "-") {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << text;
    if (!out.empty()) write_file_atomic(out, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace tp
