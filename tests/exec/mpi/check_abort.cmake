# Runs `mpirun -np 2 test_comm_mpi MODE` (default --abort: rank 1 calls abort(3, "boom"), rank 0 waits in a
# barrier) and fails unless the whole job ends within 30 s with a non-zero exit and MATCH (default
# "error: rank 1: boom") on stderr.
# Variables: MPIEXEC, NP_FLAG, EXTRA (a ;-list of extra mpirun flags), EXE, MODE, MATCH.
if(NOT MODE)
  set(MODE --abort)
endif()
if(NOT MATCH)
  set(MATCH "error: rank 1: boom")
endif()
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 2 ${EXTRA} ${EXE} ${MODE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
message(STATUS "exit: ${rc}\nstdout: ${out}\nstderr: ${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "abort did not propagate: mpirun exited 0")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "mpirun did not exit normally (hang or signal): ${rc}")
endif()
if(NOT err MATCHES "${MATCH}")
  message(FATAL_ERROR "stderr lacks '${MATCH}'")
endif()
