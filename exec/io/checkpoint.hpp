// exec/io/: what a run reads and writes on disk: checkpoints (this file) and training data (data.hpp).
// checkpoint: per-rank training checkpoints — a small JSON header plus raw tensor bytes, checksummed and
// written atomically, and the lookup of the newest checkpoint every rank completed.
// File layout (all integers little-endian):
//   8 bytes  magic "TPCKPT\0\1"
//   u64      header length H
//   H bytes  JSON header: {"format": 1, "step", "seed", "rank", "world_size", "description",
//            "payload_bytes", "payload_fnv1a64" (16 hex digits),
//            "tensors": [{"name", "dtype" ("f32"|"f64"|"i32"|"u8"), "count", "offset"}]}
//   u64      FNV-1a 64 of the H header bytes
//   payload  payload_bytes bytes; tensor i at `offset` (8-byte aligned, relative to the payload start)
// Invariants: a file is written to a fresh temporary (.NAME.tmp-XXXXXX), fsync'ed, renamed over path and its directory fsync'ed, so
// path is always either the old complete file or the new complete file; read_checkpoint accepts a file only if
// magic, header checksum, sizes, tensor bounds and payload checksum all agree, else throws std::runtime_error
// naming the file and the problem.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"  // Dtype

namespace tp::exec {

struct CheckpointHeader {
  long step = 0;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  std::string description;  // the plan / model, free text (e.g. the scenario JSON)
};

// A tensor to write: `count` elements of `dtype` at `data`.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::f32;
  const void* data = nullptr;
  long count = 0;
};

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::f32;
  long count = 0;
  uint64_t offset = 0;  // bytes from the payload start
};

struct Checkpoint {
  CheckpointHeader header;
  std::vector<TensorInfo> tensors;
  std::vector<unsigned char> payload;

  // nullptr when absent.
  const TensorInfo* find(const std::string& name) const;
  // Copies tensor `name` into dst; throws std::runtime_error when it is absent or its dtype / count differ.
  void copy_to(const std::string& name, void* dst, long count, Dtype dtype) const;
};

// Tensor names must be unique and non-empty (std::invalid_argument otherwise).
void write_checkpoint(const std::string& path, const CheckpointHeader& header, std::span<const TensorView> tensors);
Checkpoint read_checkpoint(const std::string& path);
// Validates a file without keeping its payload; returns false and the reason in *why on any problem.
bool checkpoint_valid(const std::string& path, CheckpointHeader* header = nullptr, std::string* why = nullptr);

// dir/step_00000120/rank_00003.ckpt
std::string checkpoint_path(const std::string& dir, long step, int rank);
std::string checkpoint_step_dir(const std::string& dir, long step);  // DIR/step_NNNNNNNN
// --checkpoint-dir, checked on every rank before step 1: an existing directory or one it creates, in which a step
// folder and a file can be made, and whose step folders are folders holding, for ranks 0..world_size-1, regular
// files or nothing. Throws InputError (exit 2) naming the path and what it is.
void check_checkpoint_dir(const std::string& dir, int world_size);
// --keep-checkpoints: removes the step directories older than the `keep` newest complete ones, never touching
// `newest_step` or anything newer (called after the newest is complete). Only complete, verified checkpoints
// (every rank's file valid, checksums included) count; incomplete ones newer than the oldest kept stay. keep <= 0
// keeps everything.
void prune_checkpoints(const std::string& dir, int keep, long newest_step);
// The newest step under dir for which every rank 0..world_size-1 has a valid checkpoint whose header names that
// step, rank and world size; std::nullopt when there is none. Leftover .tmp files are ignored. Newer steps passed
// over are described in `skipped` ("step_00000012: rank 1: checksum mismatch"); `other_world` is set to the rank
// count of a step passed over only because a job of that many ranks wrote it.
std::optional<long> latest_complete(const std::string& dir, int world_size, std::vector<std::string>* skipped = nullptr,
                                    int* other_world = nullptr);

uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL);
// Writes the concatenation of `parts` to a fresh temporary next to path (mkstemp: never through a symlink),
// then renames it to path (fsync of the file and of the directory when sync). A path that exists and is not a
// regular file is refused. Throws std::runtime_error naming the file and why; the temporary is removed then.
void write_file_atomic(const std::string& path, std::span<const std::span<const unsigned char>> parts, bool sync = true);

std::string dtype_name(Dtype d);
Dtype parse_dtype(const std::string& s);  // throws std::invalid_argument

}  // namespace tp::exec
