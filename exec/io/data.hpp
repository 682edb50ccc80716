// exec/io/: what a run reads and writes on disk: checkpoints (checkpoint.hpp) and training data (this file).
// data: training tokens for the executor — llm.c token files, a byte-level tokenizer, the bundled tiny corpus,
// and deterministic batch sampling.
// Invariants:
// - Token files use llm.c's format: a header of 256 little-endian int32 (magic 20240520, version 1, token
//   count, the rest 0) followed by exactly `count` uint16 tokens. Writes are atomic (temp file + rename);
//   reads reject anything else with a std::runtime_error naming the file and what was expected.
// - Batches depend only on (tokens, seed, step, global sequence index, seq_len), never on the rank layout:
//   every rank fetches exactly the sequences it owns and a parallel run sees the single-rank run's data.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tp::exec {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int kTokenFileHeaderInts = 256;

// Writes tokens to `path` in llm.c format (atomically: a fresh temporary, then rename). Throws
// std::runtime_error on I/O failure or more than INT32_MAX tokens.
void write_tokens(const std::string& path, std::span<const uint16_t> tokens);
// Reads an llm.c token file; throws std::runtime_error for a missing file, a bad magic or version, a negative
// count, or a size that does not match the header (truncated or trailing bytes).
std::vector<uint16_t> read_tokens(const std::string& path);

// Byte-level tokenizer: token id b (0..255) is the byte b; vocabulary size 256, no special tokens. Any text
// (any bytes, UTF-8 or not) round-trips exactly.
struct ByteTokenizer {
  static constexpr int vocab_size = 256;
  static std::vector<uint16_t> encode(std::string_view text);
  // Throws std::invalid_argument for an id outside [0, 256).
  static std::string decode(std::span<const uint16_t> ids);
  static std::string decode(std::span<const int32_t> ids);
};

// The bundled corpus data/tiny_corpus.txt (generated English-like text, see data/README.md). Looks in
// $TRAINPLAN_DATA, then the source tree's data/ (compiled in), then ./data; throws std::runtime_error naming
// the places searched when it is absent.
std::string corpus_text_path();
// Builds tiny_corpus.bin (byte tokens of the corpus) in `dir` (empty: next to the .txt) unless a valid one
// newer than the text is already there; returns its path. Safe to call from several ranks at once (each
// writes its own temp file; the renames are atomic and the contents identical).
std::string ensure_corpus_tokens(const std::string& dir = "");

// Sequences per micro-batch and their length; the seed selects the data order.
struct BatchSpec {
  int seq_len = 64;
  int batch = 1;  // sequences per micro-batch
  uint64_t seed = 0;
};

// One training sequence: target[t] = input[t + 1] in the token stream (next-token prediction).
struct Sequence {
  std::vector<int32_t> input;   // [seq_len]
  std::vector<int32_t> target;  // [seq_len]
};

uint64_t splitmix64(uint64_t x);
// The mapping that defines the data order. For optimizer step s and global sequence index i in
// [0, global_batch):
//   h      = splitmix64(splitmix64(splitmix64(seed) ^ s) ^ i)
//   offset = h mod (tokens.size() - seq_len)
// and the sequence is input = tokens[offset, offset + seq_len), target = tokens[offset + 1, offset + seq_len + 1).
// (Sampling with replacement; the modulo bias is below 2^-40 for any corpus under 2^24 tokens.)
// Throws std::invalid_argument when seq_len < 1 or the corpus has fewer than seq_len + 1 tokens.
uint64_t sequence_offset(size_t n_tokens, long step, long index, int seq_len, uint64_t seed);
Sequence sample_batch(std::span<const uint16_t> tokens, long step, long index, int seq_len, uint64_t seed);

// Fills inputs / targets [spec.batch, spec.seq_len] with the sequences first_index .. first_index + batch - 1
// of step `step`. Which global indices a rank owns is the runtime's choice; the usual layout is data-parallel
// rank d, micro-batch m of M: first_index = (d * M + m) * spec.batch.
void fill_micro_batch(std::span<const uint16_t> tokens, const BatchSpec& spec, long step, long first_index,
                      int32_t* inputs, int32_t* targets);

}  // namespace tp::exec
