// ops: the dispatch of every op of exec/backends/ops.def through the calling thread's current backend
// (exec/backends/backend.hpp), for float and double. One indirect call per op; no work and no memory access here.
#include "exec/backends/ops.hpp"

#include "exec/backends/backend.hpp"

namespace tp::ops {
namespace {
template <class T>
const exec::OpTable<T>& tab() { return exec::current_backend().ops<T>(); }
}  // namespace

#define TP_OP(RET, NAME, PARAMS, ARGS) \
  template <class T>                  \
  RET NAME PARAMS {                   \
    return tab<T>().NAME ARGS;        \
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
