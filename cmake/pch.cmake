# Precompiled headers (TRAINPLAN_PCH, on by default): the standard and third-party headers that most of a target's
# translation units parse anyway are compiled once per target. nlohmann/json reaches nearly every file through
# models/json_check.hpp, Boost.Graph every simulator file through sim/topology.hpp, GoogleTest every test file;
# parsing them took 2 to 3.5 of a typical file's 5 to 8 seconds. Only headers whose meaning no project macro
# changes belong here (no Eigen: files configure it before including it). A source compiled with options of its
# own (-march=native, -ffp-contract=off) skips the header (set_source_files_properties SKIP_PRECOMPILE_HEADERS): GCC would refuse the
# precompiled form and parse it as text. -DTRAINPLAN_PCH=OFF builds without, which is how to check that every
# file includes what it uses.
option(TRAINPLAN_PCH "Precompile the standard and third-party headers per target" ON)
set(TP_PCH_BASE <algorithm> <array> <cmath> <cstdint> <cstring> <functional> <map> <memory> <optional> <set>
    <sstream> <string> <unordered_map> <utility> <vector> <nlohmann/json.hpp>)

# tp_precompile(target [SIM] [TESTS]): the standard headers and nlohmann/json; SIM adds Boost.Graph (targets whose
# files include the simulator's headers), TESTS GoogleTest and the file-system headers the suites use.
function(tp_precompile target)
  cmake_parse_arguments(PCH "SIM;TESTS" "" "" ${ARGN})
  if(NOT TRAINPLAN_PCH)
    return()
  endif()
  set(headers ${TP_PCH_BASE})
  if(PCH_SIM)
    list(APPEND headers <boost/graph/adjacency_list.hpp>)
  endif()
  if(PCH_TESTS)
    list(APPEND headers <gtest/gtest.h> <filesystem> <fstream>)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
