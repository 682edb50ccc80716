// device_oom: the message for a device backend's out-of-memory during `run` (device_oom.cpp).
#pragma once
#include <string>

#include "exec/backends/backend.hpp"
#include "models/scenario.hpp"

namespace tp::exec {

// "backend cuda: out of device memory after allocating X GiB ...; the simulator predicts Y GiB ...: weights ..."
std::string device_oom_message(const Scenario& sc, const Backend& b);

}  // namespace tp::exec
