// data: llm.c token files, the byte tokenizer, the bundled corpus and deterministic sampling (see data.hpp).
// Invariants: token files are little-endian (the only byte order trainplan runs on; checked at compile time),
// written atomically, and read back only when their size matches the header exactly.
#include "exec/io/data.hpp"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include "exec/io/checkpoint.hpp"  // write_file_atomic
#include "models/safe_io.hpp"

namespace tp::exec {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

namespace fs = std::filesystem;

void write_tokens(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    throw std::runtime_error(path + ": " + std::to_string(tokens.size()) + " tokens exceed the format's int32 count");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::span<const unsigned char> parts[] = {
      {reinterpret_cast<const unsigned char*>(header), sizeof header},
      {reinterpret_cast<const unsigned char*>(tokens.data()), tokens.size() * sizeof(uint16_t)}};
  write_file_atomic(path, parts, /*sync=*/false);
}

std::vector<uint16_t> read_tokens(const std::string& path) {
  require_regular_file(path, "token file");  // a FIFO would block open() forever
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open token file");
  int32_t header[kTokenFileHeaderInts] = {};
  f.read(reinterpret_cast<char*>(header), sizeof header);
  if (f.gcount() != static_cast<std::streamsize>(sizeof header))
    throw std::runtime_error(path + ": truncated token file: expected a " + std::to_string(sizeof header) +
                             "-byte header, got " + std::to_string(f.gcount()) + " bytes");
  if (header[0] != kTokenFileMagic)
    throw std::runtime_error(path + ": bad magic " + std::to_string(header[0]) + ", expected " +
                             std::to_string(kTokenFileMagic) + " (an llm.c token file)");
  if (header[1] != kTokenFileVersion)
    throw std::runtime_error(path + ": unsupported token file version " + std::to_string(header[1]) +
                             ", expected " + std::to_string(kTokenFileVersion) + " (uint16 tokens)");
  if (header[2] < 0) throw std::runtime_error(path + ": negative token count " + std::to_string(header[2]));
  const size_t count = static_cast<size_t>(header[2]);
  const size_t expected = sizeof header + count * sizeof(uint16_t);
  std::error_code ec;
  const auto actual = fs::file_size(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot stat token file: " + ec.message());
  if (actual != expected)
    throw std::runtime_error(path + ": " + (actual < expected ? "truncated" : "trailing bytes in") +
                             " token file: header says " + std::to_string(count) + " tokens (" +
                             std::to_string(expected) + " bytes), file has " + std::to_string(actual) + " bytes");
  std::vector<uint16_t> tokens(count);
  f.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(count * sizeof(uint16_t)));
  if (f.gcount() != static_cast<std::streamsize>(count * sizeof(uint16_t)))
    throw std::runtime_error(path + ": read error in token file after " + std::to_string(f.gcount()) + " bytes");
  return tokens;
}

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

namespace {
template <class Id>
std::string decode_ids(std::span<const Id> ids) {
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const long v = static_cast<long>(ids[i]);
    if (v < 0 || v >= ByteTokenizer::vocab_size)
      throw std::invalid_argument("cannot decode token id " + std::to_string(v) + " at position " + std::to_string(i) +
                                  " as a byte: byte tokens are 0 to 255");
    s[i] = static_cast<char>(static_cast<unsigned char>(v));
  }
  return s;
}

std::string read_text(const std::string& path) { return read_file_capped(path, size_t{1} << 30, "text file"); }
}  // namespace

std::string ByteTokenizer::decode(std::span<const uint16_t> ids) { return decode_ids(ids); }
std::string ByteTokenizer::decode(std::span<const int32_t> ids) { return decode_ids(ids); }

std::string corpus_text_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TRAINPLAN_DATA"); env && *env) dirs.emplace_back(env);
#ifdef TRAINPLAN_DATA_DIR
  dirs.emplace_back(TRAINPLAN_DATA_DIR);
#endif
  dirs.emplace_back("data");
  std::string tried;
  for (const auto& d : dirs) {
    const fs::path p = fs::path(d) / "tiny_corpus.txt";
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  throw std::runtime_error("tiny_corpus.txt not found (looked in " + tried + "; set TRAINPLAN_DATA)");
}

std::string ensure_corpus_tokens(const std::string& dir) {
  const std::string txt = corpus_text_path();
  const fs::path out_dir = dir.empty() ? fs::path(txt).parent_path() : fs::path(dir);
  const std::string bin = (out_dir / "tiny_corpus.bin").string();
  const std::vector<uint16_t> want = ByteTokenizer::encode(read_text(txt));
  std::error_code ec;
  if (fs::exists(bin, ec)) {
    try {
      if (read_tokens(bin) == want) return bin;  // up to date
    } catch (const std::runtime_error&) {
      // stale or damaged: rebuilt below
    }
  }
  if (!out_dir.empty()) fs::create_directories(out_dir, ec);
  write_tokens(bin, want);
  return bin;
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t sequence_offset(size_t n_tokens, long step, long index, int seq_len, uint64_t seed) {
  if (seq_len < 1) throw std::invalid_argument("sample_batch: seq_len must be >= 1, got " + std::to_string(seq_len));
  if (n_tokens < static_cast<size_t>(seq_len) + 1)
    throw std::invalid_argument("sample_batch: the corpus has " + std::to_string(n_tokens) +
                                " tokens, a sequence needs seq_len + 1 = " + std::to_string(seq_len + 1));
  const uint64_t h =
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  return h % (n_tokens - static_cast<size_t>(seq_len));
}

Sequence sample_batch(std::span<const uint16_t> tokens, long step, long index, int seq_len, uint64_t seed) {
  const uint64_t off = sequence_offset(tokens.size(), step, index, seq_len, seed);
  Sequence s;
  s.input.assign(tokens.begin() + static_cast<long>(off), tokens.begin() + static_cast<long>(off) + seq_len);
  s.target.assign(tokens.begin() + static_cast<long>(off) + 1, tokens.begin() + static_cast<long>(off) + seq_len + 1);
  return s;
}

void fill_micro_batch(std::span<const uint16_t> tokens, const BatchSpec& spec, long step, long first_index,
                      int32_t* inputs, int32_t* targets) {
  if (spec.batch < 1) throw std::invalid_argument("fill_micro_batch: batch must be >= 1, got " + std::to_string(spec.batch));
  for (int b = 0; b < spec.batch; ++b) {
    const uint64_t off = sequence_offset(tokens.size(), step, first_index + b, spec.seq_len, spec.seed);
    for (int t = 0; t < spec.seq_len; ++t) {
      inputs[static_cast<long>(b) * spec.seq_len + t] = tokens[off + t];
      targets[static_cast<long>(b) * spec.seq_len + t] = tokens[off + t + 1];
    }
  }
}

}  // namespace tp::exec
