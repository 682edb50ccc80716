# Runs `mpirun -np 2 test_comm_mpi --abort` (rank 1 calls abort(3, "boom"), rank 0 waits in a barrier) and
# fails unless the whole job ends within 30 s with a non-zero exit and "boom" on stderr.
# Variables: MPIEXEC, NP_FLAG, EXTRA (a ;-list of extra mpirun flags), EXE.
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 2 ${EXTRA} ${EXE} --abort
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
message(STATUS "exit: ${rc}\nstdout: ${out}\nstderr: ${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "abort did not propagate: mpirun exited 0")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "mpirun did not exit normally (hang or signal): ${rc}")
endif()
if(NOT err MATCHES "error: rank 1: boom")
  message(FATAL_ERROR "stderr lacks 'error: rank 1: boom'")
endif()
