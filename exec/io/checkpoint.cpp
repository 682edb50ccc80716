// checkpoint: writing, validating and finding per-rank checkpoints (format in checkpoint.hpp).
// Invariants: nothing is ever written in place (temp + fsync + rename + directory fsync); every read checks the
// magic, the header checksum, the exact file size, each tensor's bounds and the payload checksum before any
// byte is trusted; errors name the file.
#include "exec/io/checkpoint.hpp"
#include "models/json_check.hpp"
#include "models/safe_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace tp::exec {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'T', 'P', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr int kFormat = 1;
constexpr uint64_t kMaxHeader = 64ULL << 20;  // a sanity bound against garbage lengths

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// Refuses a FIFO, device or directory before it is opened (a FIFO would block open() forever).
void require_regular(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open checkpoint: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "checkpoint is " + file_kind_of(path) + ", not a regular file");
}

// What the fixed part of a file declares, after the header checksum and JSON were verified.
struct Parsed {
  CheckpointHeader header;
  std::vector<TensorInfo> tensors;
  uint64_t payload_bytes = 0;
  uint64_t payload_fnv = 0;
};

// Reads magic, header and header checksum from f (positioned at 0) and checks the file size and tensor bounds.
Parsed parse_prefix(std::ifstream& f, const std::string& path) {
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot stat checkpoint: " + ec.message());
  char magic[8];
  uint64_t hlen = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&hlen), 8);
  if (!f) fail(path, "truncated checkpoint: shorter than the 16-byte preamble");
  if (std::memcmp(magic, kMagic, 8) != 0) fail(path, "bad magic: not a trainplan checkpoint (expected TPCKPT)");
  if (hlen == 0 || hlen > kMaxHeader || 24 + hlen > file_size)
    fail(path, "truncated or corrupt checkpoint: header length " + std::to_string(hlen) + " with a file of " +
                   std::to_string(file_size) + " bytes");
  std::string text(hlen, '\0');
  uint64_t hsum = 0;
  f.read(text.data(), static_cast<std::streamsize>(hlen));
  f.read(reinterpret_cast<char*>(&hsum), 8);
  if (!f) fail(path, "truncated checkpoint header");
  if (fnv1a64(text.data(), text.size()) != hsum) fail(path, "header checksum mismatch (corrupt header)");
  Parsed p;
  try {
    const json j = json::parse(text);
    if (j.at("format").get<int>() != kFormat)
      fail(path, "unsupported checkpoint format " + j.at("format").dump() + ", expected " + std::to_string(kFormat));
    p.header.step = j.at("step").get<long>();
    p.header.seed = j.at("seed").get<uint64_t>();
    p.header.rank = j.at("rank").get<int>();
    p.header.world_size = j.at("world_size").get<int>();
    p.header.description = j.at("description").get<std::string>();
    p.payload_bytes = j.at("payload_bytes").get<uint64_t>();
    p.payload_fnv = std::stoull(j.at("payload_fnv1a64").get<std::string>(), nullptr, 16);
    for (const auto& t : j.at("tensors")) {
      TensorInfo ti;
      ti.name = t.at("name").get<std::string>();
      ti.dtype = parse_dtype(t.at("dtype").get<std::string>());
      ti.count = t.at("count").get<long>();
      ti.offset = t.at("offset").get<uint64_t>();
      p.tensors.push_back(std::move(ti));
    }
  } catch (const json::exception& e) {
    fail(path, std::string("malformed checkpoint header: ") + e.what());
  } catch (const std::invalid_argument& e) {
    fail(path, std::string("malformed checkpoint header: ") + e.what());
  }
  const uint64_t expected = 24 + hlen + p.payload_bytes;
  if (file_size != expected)
    fail(path, std::string(file_size < expected ? "truncated" : "trailing bytes in") + " checkpoint: expected " +
                   std::to_string(expected) + " bytes, file has " + std::to_string(file_size));
  for (const auto& t : p.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.count) * dtype_bytes(t.dtype);
    if (t.count < 0 || t.offset > p.payload_bytes || bytes > p.payload_bytes - t.offset)
      fail(path, "tensor '" + t.name + "' (" + std::to_string(t.count) + " x " + dtype_name(t.dtype) + " at " +
                     std::to_string(t.offset) + ") lies outside the " + std::to_string(p.payload_bytes) +
                     "-byte payload");
  }
  return p;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string dtype_name(Dtype d) {
  switch (d) {
    case Dtype::f32: return "f32";
    case Dtype::f64: return "f64";
    case Dtype::i32: return "i32";
    case Dtype::u8: return "u8";
  }
  throw std::invalid_argument("unknown Dtype " + std::to_string(static_cast<int>(d)));
}

Dtype parse_dtype(const std::string& s) {
  if (s == "f32") return Dtype::f32;
  if (s == "f64") return Dtype::f64;
  if (s == "i32") return Dtype::i32;
  if (s == "u8") return Dtype::u8;
  throw std::invalid_argument("unknown dtype '" + s + "', expected one of: f32, f64, i32, u8");
}

void write_file_atomic(const std::string& path, std::span<const std::span<const unsigned char>> parts, bool sync) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    fail(path, "cannot write: it is " + file_kind_of(path) + ", not a regular file");
  try {
    write_outputs_atomic({OutputFile(path, std::vector<std::span<const unsigned char>>(parts.begin(), parts.end()))}, sync);
  } catch (const InputError& e) {
    throw std::runtime_error(e.messages.empty() ? path + ": cannot write" : e.messages.front());
  }
}

void write_checkpoint(const std::string& path, const CheckpointHeader& header, std::span<const TensorView> tensors) {
  json jt = json::array();
  std::set<std::string> names;
  uint64_t off = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw std::invalid_argument(path + ": a tensor has an empty name");
    if (!names.insert(t.name).second) throw std::invalid_argument(path + ": duplicate tensor name '" + t.name + "'");
    if (t.count < 0 || (t.count > 0 && !t.data))
      throw std::invalid_argument(path + ": tensor '" + t.name + "' has no data or a negative count");
    off = (off + 7) & ~uint64_t{7};
    offsets.push_back(off);
    jt.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"count", t.count}, {"offset", off}});
    off += static_cast<uint64_t>(t.count) * dtype_bytes(t.dtype);
  }
  const uint64_t payload_bytes = off;
  // The payload as written: tensors at their offsets, zero padding between them.
  static const unsigned char zeros[8] = {};
  std::vector<std::span<const unsigned char>> payload;
  uint64_t pos = 0, sum = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offsets[i] > pos) {
      payload.emplace_back(zeros, offsets[i] - pos);
      sum = fnv1a64(zeros, offsets[i] - pos, sum);
    }
    const size_t n = static_cast<size_t>(tensors[i].count) * dtype_bytes(tensors[i].dtype);
    payload.emplace_back(static_cast<const unsigned char*>(tensors[i].data), n);
    sum = fnv1a64(tensors[i].data, n, sum);
    pos = offsets[i] + n;
  }
  const json j = {{"format", kFormat},
                  {"step", header.step},
                  {"seed", header.seed},
                  {"rank", header.rank},
                  {"world_size", header.world_size},
                  {"description", header.description},
                  {"payload_bytes", payload_bytes},
                  {"payload_fnv1a64", hex64(sum)},
                  {"tensors", jt}};
  const std::string text = j.dump();
  const uint64_t hlen = text.size(), hsum = fnv1a64(text.data(), text.size());
  std::vector<std::span<const unsigned char>> parts;
  parts.emplace_back(reinterpret_cast<const unsigned char*>(kMagic), 8);
  parts.emplace_back(reinterpret_cast<const unsigned char*>(&hlen), 8);
  parts.emplace_back(reinterpret_cast<const unsigned char*>(text.data()), text.size());
  parts.emplace_back(reinterpret_cast<const unsigned char*>(&hsum), 8);
  parts.insert(parts.end(), payload.begin(), payload.end());
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) fail(path, "cannot create directory " + parent.string() + ": " + ec.message());
  }
  write_file_atomic(path, parts, /*sync=*/true);
}

Checkpoint read_checkpoint(const std::string& path) {
  require_regular(path);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open checkpoint");
  Parsed p = parse_prefix(f, path);
  Checkpoint c;
  c.payload.resize(p.payload_bytes);
  f.read(reinterpret_cast<char*>(c.payload.data()), static_cast<std::streamsize>(p.payload_bytes));
  if (static_cast<uint64_t>(f.gcount()) != p.payload_bytes) fail(path, "truncated checkpoint payload");
  if (fnv1a64(c.payload.data(), c.payload.size()) != p.payload_fnv)
    fail(path, "payload checksum mismatch (corrupt tensor data)");
  c.header = std::move(p.header);
  c.tensors = std::move(p.tensors);
  return c;
}

bool checkpoint_valid(const std::string& path, CheckpointHeader* header, std::string* why) {
  try {
    require_regular(path);
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, "cannot open checkpoint");
    Parsed p = parse_prefix(f, path);
    std::vector<char> buf(1 << 20);
    uint64_t left = p.payload_bytes, sum = 0xcbf29ce484222325ULL;
    while (left > 0) {
      const auto k = static_cast<std::streamsize>(std::min<uint64_t>(left, buf.size()));
      f.read(buf.data(), k);
      if (f.gcount() != k) fail(path, "truncated checkpoint payload");
      sum = fnv1a64(buf.data(), static_cast<size_t>(k), sum);
      left -= static_cast<uint64_t>(k);
    }
    if (sum != p.payload_fnv) fail(path, "payload checksum mismatch (corrupt tensor data)");
    if (header) *header = std::move(p.header);
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void Checkpoint::copy_to(const std::string& name, void* dst, long count, Dtype dtype) const {
  const TensorInfo* t = find(name);
  if (!t) throw std::runtime_error("checkpoint has no tensor '" + name + "'");
  if (t->dtype != dtype || t->count != count)
    throw std::runtime_error("checkpoint tensor '" + name + "' is " + std::to_string(t->count) + " x " +
                             dtype_name(t->dtype) + ", expected " + std::to_string(count) + " x " + dtype_name(dtype));
  if (count > 0) std::memcpy(dst, payload.data() + t->offset, static_cast<size_t>(count) * dtype_bytes(dtype));
}

std::string checkpoint_path(const std::string& dir, long step, int rank) {
  char sub[32], file[32];
  std::snprintf(sub, sizeof sub, "step_%08ld", step);
  std::snprintf(file, sizeof file, "rank_%05d.ckpt", rank);
  return (fs::path(dir) / sub / file).string();
}

std::string checkpoint_step_dir(const std::string& dir, long step) {
  return fs::path(checkpoint_path(dir, step, 0)).parent_path().string();
}

void check_checkpoint_dir(const std::string& dir, int world_size) {
  const std::string opt = "--checkpoint-dir: ";
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw InputError({opt + dir + " is " + (S_ISREG(st.st_mode) ? "a regular file" : file_kind_of(dir)) + "; expected a directory"});
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError({opt + "cannot create " + dir + ": " + (ec ? ec.message() : "not a directory")});
  // A checkpoint is a step folder holding a file: probe both, as the first checkpoint will make them.
  std::string probe = (fs::path(dir) / ".trainplan-probe-XXXXXX").string();
  bool ok = ::mkdtemp(probe.data()) != nullptr;
  int err = errno;
  if (ok) {
    std::string file = probe + "/probe-XXXXXX";
    const int fd = ::mkstemp(file.data());
    if (fd < 0) {
      ok = false;
      err = errno;
    } else {
      ::close(fd);
      ::unlink(file.c_str());
    }
    ::rmdir(probe.c_str());
  }
  if (!ok) throw InputError({opt + "cannot write checkpoints into " + dir + ": " + std::strerror(err)});
  // Step folders from an earlier run (a resume may skip them, and this run may write them again): folders, and
  // every rank's file in them a regular file or absent.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.compare(0, 5, "step_") != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const std::string step_dir = it->path().string();
    if (!fs::is_directory(step_dir))
      throw InputError({opt + step_dir + " is " + file_kind_of(step_dir) + "; expected a checkpoint step folder"});
    for (int r = 0; r < world_size; ++r) {
      const std::string f = (fs::path(step_dir) / fs::path(checkpoint_path(dir, 0, r)).filename()).string();
      if (::stat(f.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw InputError({opt + f + " is " + file_kind_of(f) + "; expected a checkpoint file (or none)"});
    }
  }
}

namespace {

// The step folders under dir (step_ and digits), newest first.
std::vector<long> step_folders(const std::string& dir) {
  std::error_code ec;
  std::vector<long> steps;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.compare(0, 5, "step_") != 0) continue;
    const std::string digits = name.substr(5);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (digits.size() > 18) continue;
    steps.push_back(std::stol(digits));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Whether every rank 0..world_size-1 of step s has a valid checkpoint whose header names that step, rank and world
// size (world_size 0: the size rank 0's header names). On failure `why` says which rank and why; `other_world` is
// set when the step is complete for a job of another rank count.
bool step_complete(const std::string& dir, long s, int world_size, std::string& why, int* other_world) {
  CheckpointHeader h0;
  std::string why0;
  const bool valid0 = checkpoint_valid(checkpoint_path(dir, s, 0), &h0, &why0) && h0.step == s && h0.rank == 0;
  if (world_size == 0) world_size = valid0 ? h0.world_size : 0;
  if (valid0 && h0.world_size != world_size) {  // written by a job of another size: complete there?
    std::string w;
    const bool there = h0.world_size >= 1 && step_complete(dir, s, h0.world_size, w, nullptr);
    if (there && other_world) *other_world = h0.world_size;
    why = (there ? "complete, but " : "") + std::string("written by a job of ") + std::to_string(h0.world_size) +
          " ranks; this job has " + std::to_string(world_size);
    return false;
  }
  if (world_size <= 0) {
    why = "rank 0: " + (why0.empty() ? std::string("missing or unreadable") : why0);
    return false;
  }
  for (int r = 0; r < world_size; ++r) {
    CheckpointHeader h;
    std::string w;
    bool ok = checkpoint_valid(checkpoint_path(dir, s, r), &h, &w);
    if (ok && !(h.step == s && h.rank == r && h.world_size == world_size)) {
      ok = false;
      w = "its header names step " + std::to_string(h.step) + ", rank " + std::to_string(h.rank) + " of " +
          std::to_string(h.world_size);
    }
    if (!ok) {
      why = "rank " + std::to_string(r) + ": " + (w.empty() ? "missing or unreadable" : w);
      return false;
    }
  }
  return true;
}

}  // namespace

void prune_checkpoints(const std::string& dir, int keep, long newest_step) {
  if (keep <= 0) return;
  // Only complete, verified checkpoints count (a corrupt or partial step folder is not one of the `keep`): the
  // newest_step folder is the first; older ones are kept until keep complete ones are found, then removed.
  int complete = 1;
  std::error_code ec;
  for (long s : step_folders(dir)) {
    if (s >= newest_step) continue;
    std::string why;
    if (complete >= keep) fs::remove_all(checkpoint_step_dir(dir, s), ec);
    else if (step_complete(dir, s, 0, why, nullptr)) ++complete;
  }
}

std::optional<long> latest_complete(const std::string& dir, int world_size, std::vector<std::string>* skipped,
                                    int* other_world) {
  for (long s : step_folders(dir)) {
    std::string why;
    if (world_size > 0 && step_complete(dir, s, world_size, why, other_world)) return s;
    if (skipped) skipped->push_back(fs::path(checkpoint_step_dir(dir, s)).filename().string() + ": " + why);
  }
  return std::nullopt;
}

}  // namespace tp::exec
