// search: see search.hpp. (Stub while the planner is written.)
#include "search.hpp"

#include <ostream>

namespace tp {

PlanOutcome plan_search(const Scenario& sc, const PlanOptions&) {
  throw InputError({"trainplan plan: not implemented yet"});
}
json plan_outcome_to_json(const PlanOutcome&) { return json::object(); }
std::string plan_outcome_to_csv(const PlanOutcome&) { return ""; }
void print_plan_outcome(std::ostream&, const PlanOutcome&) {}

}  // namespace tp
