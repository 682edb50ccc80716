// ops: the dispatch of every op of exec/backends/ops.def through the calling thread's current backend
// (exec/backends/backend.hpp), for float and double. One indirect call per op; no work and no memory access here
// (with prof on, a device backend's op is timed in its class).
#include "exec/backends/ops.hpp"

#include "exec/backends/backend.hpp"
#include "exec/prof/prof.hpp"

namespace tp::ops {
// A device backend's ops charge no class themselves (their work is on the device): with prof on, each op is timed
// here in its class (prof::op_class), the CPU backend's ops keep their own scopes.
#define TP_OP(RET, NAME, PARAMS, ARGS)                                      \
  template <class T>                                                        \
  RET NAME PARAMS {                                                         \
    const exec::Backend& be = exec::current_backend();                      \
    if (exec::prof::detail::g_on && !be.host_accessible) {                  \
      exec::prof::Scope scope(exec::prof::op_class(#NAME));                 \
      return be.ops<T>().NAME ARGS;                                         \
    }                                                                       \
    return be.ops<T>().NAME ARGS;                                           \
  }
#include "exec/backends/ops.def"

// Every dispatch instantiated for float and double (T spelled by the preprocessor in ops.def's parameter lists).
#define T float
#define TP_OP(RET, NAME, PARAMS, ARGS) template RET NAME<T> PARAMS;
#include "exec/backends/ops.def"
#undef T
#define T double
#define TP_OP(RET, NAME, PARAMS, ARGS) template RET NAME<T> PARAMS;
#include "exec/backends/ops.def"
#undef T

const std::vector<std::string_view>& op_names() {
  static const std::vector<std::string_view> names = {
#define TP_OP(RET, NAME, PARAMS, ARGS) #NAME,
#include "exec/backends/ops.def"
  };
  return names;
}

}  // namespace tp::ops
