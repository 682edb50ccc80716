// fused_attention: which attention runs the CUDA backend's bf16-storage flash ops (exec/backends/ops.hpp
// flash_attention_fwd16 / bwd16): a library's fused attention (cuDNN's SDPA, libtrainplan_cudnn.so, cudnn_sdpa.h)
// or the project's own flash kernels (exec/kernels/k_flash_mma.hpp). Host logic only, no CUDA header, so the CPU
// tests run it against a stand-in library (tests/kernels/kt_fused_attention.cpp).
// Invariants: a shape is asked of the library once (prepare builds its forward and backward together) and the
// verdict kept, so the forward and the backward of one shape always run on the same side; a refusal or a failed
// prepare is the own kernels' turn, with one note per shape; with the library off (mode own), or none loaded,
// nothing is asked.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "exec/kernels/cuda/cudnn_sdpa.h"

namespace tp::cuda {

// A loaded library's entries (all null when none is loaded: `missing` says why).
struct SdpaLibrary {
  tp_sdpa_prepare_fn prepare = nullptr;
  tp_sdpa_fwd_fn fwd = nullptr;
  tp_sdpa_bwd_fn bwd = nullptr;
  std::string name;     // "cuDNN 9.13.0 (frontend 1.32.0)"
  std::string missing;  // why none is loaded
  bool loaded() const { return prepare && fwd && bwd; }
};

enum class AttentionMode { own = 0, library = 1 };

class AttentionChoice {
 public:
  AttentionChoice() = default;
  AttentionChoice(SdpaLibrary lib, AttentionMode mode) : lib_(std::move(lib)), mode_(mode) {}
  // Sets the mode, returns the previous one.
  AttentionMode set_mode(AttentionMode m) {
    const AttentionMode prev = mode_;
    mode_ = m;
    return prev;
  }
  AttentionMode mode() const { return mode_; }
  // The library's workspace bytes when it runs shape s, or -1 when the own kernels do. The first call for a shape
  // prepares it (stream: where the library runs); a refusal or an error is remembered with its reason.
  long workspace_or_own(const tp_sdpa_shape& s, void* stream) {
    if (mode_ == AttentionMode::own || !lib_.loaded()) return -1;
    auto [it, fresh] = verdicts_.try_emplace(key(s), -1);
    if (!fresh) return it->second;
    char why[512] = "";
    size_t ws = 0;
    const int st = lib_.prepare(&s, stream, &ws, why, sizeof why);
    if (st == TP_SDPA_OK) return it->second = long(ws);
    notes_.push_back(std::string(st == TP_SDPA_REFUSED ? "refused" : "failed") + " for B " + std::to_string(s.B) +
                     ", Tq " + std::to_string(s.Tq) + ", Tk " + std::to_string(s.Tk) + ", H " + std::to_string(s.H) +
                     ", Hkv " + std::to_string(s.Hkv) + ", D " + std::to_string(s.D) + ": " + why);
    return -1;
  }
  const SdpaLibrary& library() const { return lib_; }
  // Shapes the library refused or failed to prepare, one line each (the caller prints each once).
  const std::vector<std::string>& notes() const { return notes_; }
  // "cuDNN 9.13.0 (frontend 1.32.0) fused attention" / "own flash kernels (<why>)", for --version and the logs.
  std::string describe() const {
    if (!lib_.loaded()) return "own flash kernels (" + lib_.missing + ")";
    if (mode_ == AttentionMode::own) return "own flash kernels (" + lib_.name + " loaded, off: TP_CUDA_ATTENTION=own)";
    return lib_.name + " fused attention, own flash kernels where it refuses a shape";
  }

 private:
  using Key = std::tuple<long, long, long, long, long, long, long, long, float>;
  static Key key(const tp_sdpa_shape& s) { return {s.B, s.Tq, s.Tk, s.H, s.Hkv, s.D, s.ldq, s.ldkv, s.scale}; }
  SdpaLibrary lib_;
  AttentionMode mode_ = AttentionMode::own;
  std::map<Key, long> verdicts_;
  std::vector<std::string> notes_;
};

// The process's choice (fused_attention.cpp): libtrainplan_cudnn.so loaded from beside libtrainplan_cuda.so on first
// use; mode library unless TP_CUDA_ATTENTION=own.
AttentionChoice& attention_choice();
// libtrainplan_cudnn.so's entries, or why it cannot be loaded (also without a device: --version).
SdpaLibrary load_sdpa_library();

}  // namespace tp::cuda
