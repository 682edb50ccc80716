// report: see report.hpp. (Stub while the report generator is written.)
#include "report.hpp"

#include <iostream>

namespace tp {

int report_main(const std::vector<std::string>&) {
  std::cerr << "error: trainplan report: not implemented yet\n";
  return 2;
}

}  // namespace tp
