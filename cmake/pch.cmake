# Precompiled headers (TRAINPLAN_PCH, on by default): the standard and third-party headers that most of a target's
# translation units parse anyway are compiled once per target. nlohmann/json reaches nearly every file through
# models/json_check.hpp, Boost.Graph every simulator file through sim/topology.hpp, GoogleTest every test file;
# parsing them took 2 to 3.5 of a typical file's 5 to 8 seconds. Only headers whose meaning no project macro
# changes belong here (no Eigen: files configure it before including it). A source compiled with options of its
# own (-march=native) skips the header (set_source_files_properties SKIP_PRECOMPILE_HEADERS): GCC would refuse the
# precompiled form and parse it as text. -DTRAINPLAN_PCH=OFF builds without, which is how to check that every
# file includes what it uses.
option(TRAINPLAN_PCH "Precompile the standard and third-party headers per target" ON)
set(TP_PCH_STD <algorithm> <array> <cmath> <cstdint> <cstring> <functional> <map> <memory> <optional> <set>
    <sstream> <string> <unordered_map> <utility> <vector>)

# tp_precompile(target [header ...]): the standard set plus the target's own headers (e.g. <nlohmann/json.hpp>).
function(tp_precompile target)
  if(TRAINPLAN_PCH)
    target_precompile_headers(${target} PRIVATE ${TP_PCH_STD} ${ARGN})
  endif()
endfunction()
