// exec/backends/cuda/: the CPU program's side of the CUDA backend (the library itself: exec/kernels/cuda/).
// cuda_loader: the CPU program's side of the CUDA backend. It finds libtrainplan_cuda.so, dlopens it (the
// program links no CUDA library), checks its C ABI version and asks it for the backend or its versions
// (exec/kernels/cuda/cuda_backend.h). Search order: $TRAINPLAN_CUDA_LIB (a file), the program's directory,
// ../lib beside it, the build tree's library directory (compiled in), then the dynamic loader's own search
// (LD_LIBRARY_PATH, ldconfig). Invariants: the library is opened at most once per process and never closed
// (the backend's tables live in it); a binary built with TRAINPLAN_CUDA=OFF never looks for it.
#pragma once
#include <string>

#include "exec/backends/backend.hpp"

namespace tp::exec {

enum class CudaLoad {
  ok,
  not_built,  // this binary was built without the CUDA library: "backend cuda is not built in this version"
  no_device,  // the library loaded, no usable device (why: "no CUDA device: cudaGetDeviceCount returned 35 ...")
  error,      // library missing or unloadable, ABI mismatch, or device setup failed (why says which)
};

// The CUDA backend of this process on the device of its local rank (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK; 0 when none is set), or null with status and why.
const Backend* load_cuda_backend(CudaLoad& status, std::string& why);
// This process's rank on its node, which picks its GPU (device local rank % device count): the first of
// OMPI_COMM_WORLD_LOCAL_RANK (Open MPI, also under srun), MPI_LOCALRANKID (MPICH, Intel MPI), SLURM_LOCALID and
// LOCAL_RANK (torchrun) that holds a whole number >= 0; 0 when none does.
int local_rank_from_env();
// Whether this binary was built with the CUDA library (TRAINPLAN_CUDA on).
bool cuda_built_in();
// One line of CUDA versions from the library (runtime, driver, cuBLASLt, NCCL), or why it cannot be read.
std::string cuda_versions_line();
// The device communicator's table on NCCL (exec/comm/device_comm.hpp) from the library, which dlopens NCCL, or
// null with why (not built, the library or NCCL does not load).
struct DeviceCommOps;
const DeviceCommOps* load_nccl_ops(std::string& why);

}  // namespace tp::exec
