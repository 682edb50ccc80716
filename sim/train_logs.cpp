// train_logs: step times from Megatron-LM, DeepSpeed and TorchTitan logs. See train_logs.hpp.
#include "train_logs.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "models/json_check.hpp"

namespace tp {

namespace {

// The number after `key` on the line (commas inside the number allowed, as TorchTitan prints "6,123"); NaN
// when absent or not a number.
double number_after(const std::string& line, const std::string& key) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return NAN;
  size_t i = at + key.size();
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  std::string digits;
  for (; i < line.size() && (std::isdigit((unsigned char)line[i]) || line[i] == '.' || line[i] == ','); ++i)
    if (line[i] != ',') digits += line[i];
  if (digits.empty()) return NAN;
  try {
    return std::stod(digits);
  } catch (const std::exception&) {
    return NAN;
  }
}

}  // namespace

LogStepTimes read_log_step_times(const std::string& text, const std::string& where, double global_batch,
                                 double tokens_per_step, int gpus, int skip) {
  LogStepTimes out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    double v = number_after(line, "elapsed time per iteration (ms):");
    if (std::isfinite(v) && v > 0) {
      out.format = "megatron";
      out.step_s.push_back(v / 1000);
      continue;
    }
    v = number_after(line, "CurrSamplesPerSec=");
    if (std::isfinite(v) && v > 0 && global_batch > 0) {
      out.format = "deepspeed";
      out.step_s.push_back(global_batch / v);
      continue;
    }
    if (line.find("step:") != std::string::npos) {
      v = number_after(line, "tps:");
      if (std::isfinite(v) && v > 0 && tokens_per_step > 0 && gpus > 0) {
        out.format = "torchtitan";
        out.step_s.push_back(tokens_per_step / (v * gpus));
      }
    }
  }
  if (out.step_s.empty())
    throw InputError({where + ": no iteration line found (expected Megatron-LM's \"elapsed time per iteration (ms): X\", "
                      "DeepSpeed's \"CurrSamplesPerSec=X\" or TorchTitan's \"step: N ... tps: X\")"});
  out.skipped = std::min<int>(skip, (int)out.step_s.size() - 1);
  std::vector<double> rest(out.step_s.begin() + out.skipped, out.step_s.end());
  std::sort(rest.begin(), rest.end());
  const size_t n = rest.size();
  out.median_s = n % 2 ? rest[n / 2] : 0.5 * (rest[n / 2 - 1] + rest[n / 2]);
  return out;
}

}  // namespace tp
