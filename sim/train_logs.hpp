// train_logs: the step time of a measured run, read from a framework's standard training log. Megatron-LM and
// Megatron-DeepSpeed ("elapsed time per iteration (ms): X"), DeepSpeed's throughput timer ("CurrSamplesPerSec=X":
// global batch / X) and TorchTitan ("tps: X", tokens per second per GPU: global batch x sequence / (X x GPUs)).
// The first `skip` logged steps are warm-up (compilation, allocator growth, NCCL setup) and left out; the step
// time is the median of the rest, so one slow step (a checkpoint, an evaluation) does not move it.
#pragma once
#include <string>
#include <vector>

namespace tp {

struct LogStepTimes {
  std::string format;          // "megatron", "deepspeed" or "torchtitan"
  std::vector<double> step_s;  // every logged step, in order
  int skipped = 0;             // warm-up steps left out of the median
  double median_s = 0;
};

// `text` is the log; tokens_per_step and gpus convert TorchTitan's tokens/s per GPU, global_batch DeepSpeed's
// samples/s. Throws InputError naming `where` when no iteration line is found or fewer than one step remains
// after the warm-up.
LogStepTimes read_log_step_times(const std::string& text, const std::string& where, double global_batch,
                                 double tokens_per_step, int gpus, int skip = 2);

}  // namespace tp
