// exec/backends/emu/: the emu and emu-device backends, the kernels of exec/kernels/ on the CPU block emulator.
// backend_emu (internal to the emu backend's files): the device-memory registry check, the launcher and the runner
// of the op -> kernel bridges (exec/kernels/k_ops.hpp), and the backend's own ops (backend_emu_own.cpp).
// Invariants: every pointer an emu op receives is checked with need() before any kernel runs: it must lie,
// with its whole extent, inside one live allocation of the emu backend, else the op throws an error naming
// the op and the argument. Scratch buffers the ops use internally are the backend's own business.
#pragma once
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/kernels/emulator/emu.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::exec::emu_be {

// Throws std::runtime_error("emu backend: <op>: <arg> ...") unless [p, p + bytes) lies inside one live emu
// allocation. bytes == 0 checks nothing (an empty argument may be any pointer); optional arguments pass null.
void need(const char* op, const char* arg, const void* p, size_t bytes);
inline void opt(const char* op, const char* arg, const void* p, size_t bytes) {
  if (p) need(op, arg, p, bytes);
}
// The emu backend's device memory (registered, 0xff-filled) and its checked copy; backend_emu_device.cpp builds
// the emu-device backend on them.
void* emu_alloc(size_t bytes);
void emu_free(void* p);
void emu_copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s);

using kernels::bytes_of;  // (exec/kernels/k_runner.hpp: the bytes of n elements, 0 for n <= 0)

// The launcher of every emu op: fiber engine (unless TP_EMU_ENGINE chooses), blocks of `block` threads,
// grids capped at max_grid blocks (grid-stride loops cover the rest). TP_EMU_BLOCK and TP_EMU_GRID override
// the two (the kernels are correct for any; 32-thread blocks are the fastest to emulate: a 64-thread block
// costs about 2.5x as much per step of training, tests/kernels cover 32 to 1024).
struct Launch {
  unsigned block = 32;
  unsigned max_grid = 8;
  template <class K>
  void operator()(const K& k, kernels::Dim d) const {
    kernels::emu::launch(k, d);
  }
};
const Launch& launcher();

// The emu backend's runner of the bridges written once for emu and CUDA (exec/kernels/k_runner.hpp): the
// emulator's launcher, the registry's checks, host scratch (zero-filled, per op call).
struct EmuRunner {
  mutable std::vector<double> buf;
  const Launch& launch() const { return launcher(); }
  void check(const char* op, const char* arg, const void* p, size_t bytes) const { need(op, arg, p, bytes); }
  template <class F>
  void run(const char*, std::initializer_list<std::pair<const char*, long>>, F&& body) const { body(); }
  void* scratch(size_t bytes) const {
    if (bytes == 0) return nullptr;
    buf.assign((bytes + sizeof(double) - 1) / sizeof(double), 0.0);
    return buf.data();
  }
  double read_back(const double* p) const { return *p; }
  void upload(void* dst, const void* src, size_t bytes) const { std::memcpy(dst, src, bytes); }
};

// Fills the entries of the ops the backend writes itself (ops.def TP_OWN_OP: the GEMMs, attention and flash
// attention; backend_emu_own.cpp).
template <class T>
void set_own_ops(OpTable<T>& t);

}  // namespace tp::exec::emu_be
